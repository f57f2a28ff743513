"""Hyperparameter optimisation on Optuna (``dlbench hpo``): the study file (``study``), its search space
(``space``), samplers and pruners (``search``), the storage shared by parallel workers (``storage``),
engines that run the workers (``engine``), external-command trials and their FoM grammar (``command``,
``fom``, ``trial``), and the data of the read commands (``summary``).

Nothing here runs a trial through the run pipeline itself: ``dlbench.api.hpo`` injects that.
"""
