"""The notebook's TensorBoard helper against a real TensorBoard: served on 127.0.0.1, answering HTTP,
and gone — with every process it started — after ``stop()``."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from dlbench.errors import UsageError
from dlbench.notebook.tensorboard import tensorboard

pytest.importorskip("tensorboard")


def test_tensorboard_serves_the_logdir_on_localhost_and_stops_cleanly(tmp_path, left_running):
    board = tensorboard(tmp_path / "tb")
    try:
        assert board.url.startswith("http://127.0.0.1:") and board.running
        with urllib.request.urlopen(board.url, timeout=10) as response:
            assert response.status == 200 and b"TensorBoard" in response.read()
        assert board.url in board._repr_html_()
    finally:
        board.stop()
    assert not board.running
    assert left_running() == []  # its data server too


def test_tensorboard_keeps_answering_once_its_warnings_outgrow_a_pipe(tmp_path):
    """TensorBoard warns on each path it cannot serve (~100 bytes on stderr): with its stderr a pipe nobody read, the
    64 KiB pipe filled and it froze at the 653rd such request (a browser's missing favicon each reload would do)."""
    board = tensorboard(tmp_path / "tb")
    try:
        for i in range(1000):
            with pytest.raises(urllib.error.HTTPError, match="404"):
                urllib.request.urlopen(f"{board.url}no-such-page-{i}", timeout=30)
        assert any("not found, sending 404" in line for line in board.stderr_tail)  # its last words are kept
        with urllib.request.urlopen(board.url, timeout=30) as response:
            assert response.status == 200
    finally:
        board.stop()


def test_a_file_as_logdir_is_refused(tmp_path):
    path = tmp_path / "events.txt"
    path.write_text("not a folder")
    with pytest.raises(UsageError, match="is a file"):
        tensorboard(path)
