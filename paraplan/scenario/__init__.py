"""The scenario wing: reading a scenario (a training job's ``model:``, ``cluster:``, ``job:``,
``plan:`` and ``solver:`` sections) from a file or a dict into a checked ``Scenario``.

- ``schema.py``: the sections, ``Scenario`` and ``load_scenario``;
- ``section.py``: the ``Section`` base every section builds on;
- ``model_section.py``: the ``model:`` section;
- ``plan_doc.py``: the one plan document (``PlanDoc``: the scenario's ``plan:``, a result's plan);
- ``plan_knobs.py``: the one reading of a plan document into the knobs it fixes;
- ``scenario_file.py``: reading a scenario file safely.

``paraplan.Scenario`` and ``paraplan.load_scenario`` stay at the top level.
"""
