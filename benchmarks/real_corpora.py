"""Real corpora built offline from this machine's files, for benchmarks/data_prepare.py
(--real), and the memory of a process tree.

- code: the .py/.md/.txt/.rst files (up to 1 MB) of the running Python's site-packages;
- prose: the English man pages (sections 1-8; groff requests and escapes stripped) and the
  text under /usr/share/doc (READMEs, NEWS and changelogs, copyright and license texts,
  decompressed; HTML tags stripped).

Each file becomes one document, a .txt file named after it; the files are copied until the
size is reached, copy k > 0 under `copy<k>/` with its first line replaced (a new document).
"""

from __future__ import annotations

import gzip
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

from training.data import filehash, sources

CODE_SUFFIXES = (".py", ".md", ".txt", ".rst")
MAN_SECTIONS = "12345678"


def _code_files() -> Iterator[tuple[str, bytes]]:
    root = sources.site_packages_root()
    for p in sorted(root.rglob("*")):
        if p.suffix in CODE_SUFFIXES and p.is_file() and p.stat().st_size <= 1 << 20:
            yield p.relative_to(root).as_posix(), p.read_bytes()


def _groff_text(raw: str) -> str:
    """A man page's words: request lines dropped, font and character escapes removed."""
    lines = (line for line in raw.splitlines() if not line.startswith((".", "'")))
    text = "\n".join(lines)
    return re.sub(r"\\f[BIRP]|\\f\(..|\\\(..|\\[-&e|^]|\\s[-+]?\d", "", text)


def _prose_files() -> Iterator[tuple[str, bytes]]:
    roots = [Path(f"/usr/share/man/man{s}") for s in MAN_SECTIONS] + [Path("/usr/share/doc")]
    for root in roots:
        for p in sorted(root.rglob("*")) if root.is_dir() else []:
            if not p.is_file() or p.is_symlink():
                continue
            try:
                raw = gzip.open(p).read() if p.suffix == ".gz" else p.read_bytes()
            except (OSError, EOFError):
                continue
            if b"\0" in raw[:4096]:  # binary
                continue
            text = raw.decode("utf-8", "replace")
            if root.name.startswith("man"):
                text = _groff_text(text)
            elif ".htm" in p.name:
                text = re.sub(r"<[^>]+>", " ", text)
            yield f"{root.name}/{p.relative_to(root).as_posix()}", text.encode()


def real_corpus(kind: str, folder: Path, mb: int) -> Path:
    """~mb MB of `kind` (code | prose) as .txt files in `folder` (built once)."""
    done = folder / ".complete"
    if done.exists():
        return folder
    files = list(_code_files() if kind == "code" else _prose_files())
    size, copy = 0, 0
    while size < mb * 10**6:
        for rel, data in files:
            if copy:  # a new first line: another document
                data = f"copy {copy} of {rel}\n".encode() + data.split(b"\n", 1)[-1]
            out = folder / (f"copy{copy}/" if copy else "") / f"{rel}.txt"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(data)
            size += len(data)
            if size >= mb * 10**6:
                break
        copy += 1
    done.touch()
    newest = max(p.stat().st_mtime for p in folder.rglob("*.txt"))
    time.sleep(max(0.0, newest + filehash.RACY_S - time.time()))
    return folder


def tree_pss_mb(root: int) -> float:
    """The summed PSS (MB) of process `root` and its descendants."""
    return sum(tree_pss_parts_mb(root).values())


def tree_pss_parts_mb(root: int) -> dict[str, float]:
    """The PSS (MB) of process `root` and of each descendant, keyed "pid command": where a
    peak of the sum sits (the builder, the BPE trainer, a worker)."""
    parents = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    parents[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        tree.add(pid)
        todo += [c for c, pp in parents.items() if pp == pid and c not in tree]
    parts = {}
    for pid in tree:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                kb = sum(int(line.split()[1]) for line in f if line.startswith("Pss:"))
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        parts[f"{pid} {args[-60:]}"] = kb / 1024
    return parts
