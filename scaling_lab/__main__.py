"""`python -m scaling_lab ...`: the `scaling-lab` command without its installed script."""

from scaling_lab.cli import main

if __name__ == "__main__":
    main()
