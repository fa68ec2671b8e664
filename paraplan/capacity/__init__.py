"""Capacity planning: which cluster, how long, for how much (issue 25).

``sections``: the scenario's ``cluster.choose``, ``job.tokens`` / ``deadline_days`` /
``budget_usd``, ``objective`` and ``reliability`` sections; ``terms``: time to train, goodput and
cost of a plan on its cluster (cost/reliability.py); ``solve``: the cluster search (the branch and
bound of solver/capacity.py over every candidate cluster); ``report``: its text; ``sweep``: grids
of scenarios in worker processes or on Ray. Imported lazily by paraplan.api (``solve`` needs it).
"""
