"""The reports wing of the front door: what a person reads about a result.

``text`` (the terminal and ``--json`` summary), ``explain`` (why this plan: what binds, what the
runner-up loses), ``html`` (the one-page HTML report), ``svg`` and ``cluster`` (its drawings of the
stages and of the cluster's groups). Each reads a Result and the cost model; none searches.
"""
