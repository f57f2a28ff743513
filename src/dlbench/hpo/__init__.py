"""Hyperparameter optimisation on Optuna (``dlbench hpo``): the study file (``study``), its search space
(``space``), samplers and pruners (``search``), the storage shared by parallel workers (``storage``),
the engine contract and registry (``_base``) and the engines (``local``, ``slurm``, ``ray_engine`` with
``ray_trial`` and ``ray_pbt``), running a study (``run``), the objectives (``objective``: command and
workload, ``mlperf_trial``), external-command trials and their FoM grammar (``command``, ``fom``,
``trial``), and the data of the read commands (``summary``).

The run pipeline a trial goes through lives above (``dlbench.api``): its entry points hand it in.
"""
