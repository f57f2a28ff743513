"""Small fixture logs for the tests, written line by line (the point is often a malformed log)."""

import json


def mllog(time_ms, key, value=None, metadata=None):
    return ":::MLLOG " + json.dumps({"namespace": "", "time_ms": time_ms, "event_type": "POINT_IN_TIME",
                                     "key": key, "value": value, "metadata": metadata or {}})


def good_lines(benchmark="resnet", start_ms=1_000_000, minutes=10.0, status="success", extra=()):
    return [mllog(start_ms - 2000, "submission_benchmark", benchmark),
            mllog(start_ms - 1000, "submission_division", "closed"),
            mllog(start_ms, "run_start"), *extra,
            mllog(start_ms + round(minutes * 60_000), "run_stop", metadata={"status": status})]


def write(path, lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path
