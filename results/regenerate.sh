#!/usr/bin/env bash
# Regenerate every committed report in results/ from its runs.csv and curves.csv (no MLflow
# store needed): run after any change to analysis/, then fix every sentence whose number moved.
#   bash results/regenerate.sh            # all folders
#   bash results/regenerate.sh demo       # one folder
set -euo pipefail
cd "$(dirname "$0")/.."
export MPLBACKEND=Agg

report() {  # folder, extra args...
  local dir=results/$1; shift
  python -m analysis.report --csv "$dir/runs.csv" --curves "$dir/curves.csv" "$@" --out "$dir"
}

# the demo's blocks by the names its sweep file and run names use (the sweep passes these itself)
demo_labels=(--label pre-rmsnorm-rope-gqa2-swiglu=llama --label post-layernorm-sinusoidal-mha-gelu=vanilla)

sel=("$@")
run() { local name=$1; shift; if [ ${#sel[@]} -eq 0 ] || [[ " ${sel[*]} " == *" $name "* ]]; then "$@"; fi; }

run demo report demo --compare arch --baseline pre-rmsnorm-rope-gqa2-swiglu "${demo_labels[@]}" --tune train.lr --tune train.warmup \
  --title scaling-lab
run demo report demo/previous_plan --compare arch --baseline pre-rmsnorm-rope-gqa2-swiglu "${demo_labels[@]}" --tune train.lr \
  --tune train.warmup --title "scaling-lab demo, the previous plan (3 sizes from 3e4, one seed)"
run demo report demo/full_grid --compare arch --baseline pre-rmsnorm-rope-gqa2-swiglu "${demo_labels[@]}" --tune train.lr \
  --tune train.warmup --title "scaling-lab demo, tuned by the full grid (the check of results/demo)"
run ref_ladder report ref_ladder \
  --title "Reference scaling ladder: llama block, IsoFLOP, stdlib corpus, CPU"
run ref_ladder_v2 report ref_ladder_v2 \
  --title "Reference ladder v2: IsoFLOP ladder + WSD token grid, llama block, batch 1024, lr 4e-3, CPU"
run ref_ladder_v2 python -m analysis.fit --csv results/ref_ladder_v2/runs.csv --params total \
  --out results/ref_ladder_v2/fit_total_params.json
run ref_ablation report ref_ablation \
  --title "Reference ablation: one factor at a time vs the llama block, CPU"
run ref_ablation_v2 report ref_ablation_v2 \
  --title "Reference ablation v2: one factor at a time against the llama block, 3 sizes x 2 token budgets x 2 seeds, CPU"
run ref_attention_shape report ref_attention_shape --compare model.n_kv_heads --baseline 2.0 \
  --title "Attention kind at a fixed shape: 3 layers, 4 query heads, KV heads 4 / 2 / 1, 1.5M tokens, CPU"
run ref_ablation_tuned report ref_ablation_tuned --tune train.lr --tune train.warmup \
  --title "Reference ablation, tuned: one factor at a time against the llama block, each variant x size at its own best lr and warmup, 3 sizes x 2 token budgets, CPU"
run ref_ablation_tuned report ref_ablation_tuned/grid --tune train.lr --tune train.warmup \
  --title reference-ablation-tuned-grid
run ref_ablation_tuned python -m analysis.tuning_check --tuned results/ref_ablation_tuned/runs.csv \
  --grid results/ref_ablation_tuned/grid/runs.csv --tune train.lr --tune train.warmup \
  --out results/ref_ablation_tuned/halving_check.md
run demo python -m analysis.tuning_check --tuned results/demo/halving_runs.csv \
  --grid results/demo/full_grid/runs.csv --tune train.lr --tune train.warmup --out results/demo/halving_check.md
run demo python -m analysis.tuning_check --tuned results/demo/previous_plan/runs.csv \
  --grid results/demo/full_grid/runs.csv --tune train.lr --tune train.warmup \
  --out results/demo/previous_plan/curve_vs_grid.md
curve_check() {  # grid folder, other seed's folder, output: the one-prefix rule (rule: predicted)
  python -m analysis.tuning_check --strategy curve --rule tissue --grid "results/demo/$1/runs.csv" \
    --curves "results/demo/$1/curves.csv" --seed-grid "results/demo/$2/runs.csv" \
    --tune train.lr --tune train.warmup --out "results/demo/$3"
}
run demo curve_check curve_grid curve_grid_seed1 curve_tuning_check.md
run demo curve_check curve_grid_seed1 curve_grid curve_tuning_check_seed1.md
run demo curve_check curve_grid_seed2 curve_grid curve_tuning_check_seed2.md
tv=results/tuning_validation
run tuning_validation python -m analysis.tuning_validation --tune train.lr --tune train.warmup \
  --grid demo=results/demo/curve_grid,results/demo/curve_grid_seed1,results/demo/curve_grid_seed2 \
  --grid gpt2=$tv/tv_gpt2,$tv/tv_gpt2_seed1 --grid llama_postln=$tv/tv_llama_postln,$tv/tv_llama_postln_seed1 \
  --grid sitepackages=$tv/tv_sitepackages,$tv/tv_sitepackages_seed1 \
  --slope-runs results/demo/runs.csv --jobs 2 --out $tv/held_out.md
run ref_ladder_tuned report ref_ladder_tuned --tune train.lr --compute exact \
  --title "Reference ladder, tuned: IsoFLOP ladder in exact FLOPs, lr tuned per size, site-packages corpus (under one epoch), llama block, CPU"
run ref_families report ref_families --tune train.lr --group family \
  --title "Reference families: decoder, encoder, encoder-decoder, llama block, 3 sizes x 3 token budgets, lr tuned per size, CPU"
run mup_transfer python -m benchmarks.mup_transfer --analyse-only --out results/mup_transfer
run ref_hparams report ref_hparams --tune train.lr --tune train.batch_tokens \
  --title "Reference lr x batch surface: llama block, 3 sizes x 2 token budgets, 6 lrs x 5 batch sizes, full grid, CPU"
run depth_transfer python -m benchmarks.depth_transfer --analyse-only --out results/depth_transfer
run ref_moe report ref_moe --compare arch --baseline pre-rmsnorm-rope-gqa2-swiglu --tune train.lr \
  --title "Dense vs MoE at matched active size: llama block, 8 experts top-2 + 1 shared, 3 sizes x 3 budgets, lr tuned per arm, 2 seeds, CPU"
run ref_wallclock report ref_wallclock --target-compute 1e12 --title "Wall-clock ablation: llama block vs MHA and GELU, 2 widths x 2 token budgets, one seed, interleaved, CPU"
run porian python -m benchmarks.porian --csv results/porian/runs.csv --out results/porian/table.md \
  --figures results/porian/figures
