"""A run that goes on until a signal or a scheduler stops it, its steps paced so its ranks keep no core busy while
the test waits (the ``faulty`` workload of tests/distributed/faulty.py: a test using it asks for the ``faulty``
fixture). Two spellings of the same run: spec fields for the library, arguments for the CLI."""

PACE_S = 0.05
#: RunSpec fields.
PACED = {"workload": "faulty", "params": {"pace_s": PACE_S}, "batch_size": 4, "warmup": 1, "steps": 100_000_000}
#: ``dlbench run`` arguments.
PACED_ARGS = ["faulty", "-p", f"pace_s={PACE_S}", "-b", "4", "--warmup", "1", "--steps", "100000000"]
