"""Tuning and curves: tuned arms and lr rules (`arms`), laws of the optimal lr and batch size
(`hparam_*`, `critical_batch`), loss-curve laws and curve-aware tuning (`curves`, `curve_*`,
`schedule_replay`), and the checks of a tuning strategy against a full grid (`tuning_check`,
`tuning_validation`)."""
