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
