"""Verdicts: a variant against the baseline (`ablation`: compute multipliers, Holm-controlled),
matched cells, the noise scale, wall-clock time, decision accuracy, and their sentences
(`summary`)."""
