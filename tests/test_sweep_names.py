"""Run names of a sweep's points: readable among siblings (block, N, D, swept values), unique."""

from sweeps import plan
from sweeps.names import RunNames, block, run_name


def _run(overrides, n=1_200_000, d=20e6, variant="base", phase="run", key="a" * 16):
    facts = plan.RunFacts(
        run_key=key,
        arch="pre-rmsnorm-rope-gqa2-swiglu",
        n_layers=4,
        d_model=128,
        n_params=n,
        n_params_nonembed=n,
        flops_per_token=6.0 * n,
        tokens=d,
        batch_tokens=1024,
    )
    return plan.PlannedRun(0, tuple(overrides), variant, phase, facts)


def test_name_holds_block_size_tokens_and_swept_values():
    run = _run(["model=llama", "model.size=1.2e6", "train.tokens=2e7", "train.lr=3e-3"])
    assert run_name(run, ["model", "model.size", "train.tokens", "train.lr"], "x") == (
        "llama-N1.2M-D20M-lr3e-3"
    )
    tuned = _run(["train.lr=0.001", "train.warmup=0.02", "++tracking.tags.arm='abc'"])
    assert run_name(tuned, ["train.lr", "train.warmup"], "vanilla") == (
        "vanilla-N1.2M-D20M-lr0.001-wu0.02"
    )


def test_variant_and_wsd_phase_are_named():
    run = _run(["model.n_kv_heads=1"], variant="mqa", phase="branch")
    assert block(run, "llama") == "mqa-llama"
    assert run_name(run, [], "llama") == "mqa-llama-N1.2M-D20M-branch"


def test_names_stay_unique_and_keys_are_untouched():
    names = RunNames(["train.seed"], "llama")
    a, b = _run(["x.y=1"], key="1" * 16), _run(["x.y=2"], key="2" * 16)
    first, second = names(a), names(b)
    assert first == "llama-N1.2M-D20M" and second == "llama-N1.2M-D20M-222222"
    assert names(a) == first  # the same point keeps its name
    assert (a.run_key, b.run_key) == ("1" * 16, "2" * 16)


def test_a_tuned_value_keeps_the_sweep_files_unit_in_every_run_of_its_arm():
    """A prefix run's override holds its warmup in steps (what a run to the arm's budget
    computes), the runs after the choice the sweep's fraction: both names say the fraction."""
    written = "++tracking.tags.tune_values='train.lr=0.002,train.warmup=0.08'"
    prefix = _run(["train.lr=0.002", "train.warmup=20", written], d=28_672, phase="candidate")
    transfer = _run(["train.lr=0.002", "train.warmup=0.08", written], d=5e5, phase="transfer")
    swept = ["train.lr", "train.warmup"]
    assert run_name(prefix, swept, "llama") == "llama-N1.2M-D28.7K-lr0.002-wu0.08"
    assert run_name(transfer, swept, "llama") == "llama-N1.2M-D500K-lr0.002-wu0.08"
    # a value that is a list keeps its commas
    listed = "++tracking.tags.tune_values='train.betas=[0.9,0.95],train.lr=0.002'"
    run = _run(["train.betas=[0.9,0.95]", "train.lr=0.002", listed])
    assert run_name(run, ["train.betas", "train.lr"], "x") == "x-N1.2M-D20M-betas[0.9,0.95]-lr0.002"


def test_the_demos_prefix_runs_are_named_in_warmup_fractions(comp):
    """The planned prefixes of a tuned grid (warmup fractions in the sweep, steps in the runs'
    overrides): every name's `wu` field is one of the sweep's fractions."""
    from sweep_helpers import tuned_plan

    args = ["sweep=grid", "+sweep.tune={train.lr:[1e-3,4e-3],train.warmup:[0.02,0.08]}"]
    _, _, tp = tuned_plan(comp, args)
    names = RunNames(["model.size", "train.tokens", "train.lr", "train.warmup"], "llama")
    prefixes = tp.first_stage()
    steps = {o for r in prefixes for o in r.overrides if o.startswith("train.warmup=")}
    assert steps and all(float(o.split("=")[1]) >= 1 for o in steps)  # steps in the runs
    fields = {names(r).split("-wu")[1].split("-")[0] for r in prefixes}
    assert fields == {"0.02", "0.08"}
