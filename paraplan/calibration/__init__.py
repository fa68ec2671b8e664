"""The calibration wing of the front door: fitting the cost model's efficiencies to measured runs.

``records`` (the measured-run files users bring), ``calibrate`` (the fit, ``paraplan calibrate``),
``microfit`` (per-GEMM and per-collective micro-benchmark fits), ``profile`` (measuring this
machine, ``paraplan profile``) and ``cli`` (their subcommands).
"""
