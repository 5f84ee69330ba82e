"""`python -m sweeps.ui`: the URL it prints opens MLflow's model-training view of the runs.

MLflow 3.17 picks its GenAI or model-training view from the URL's `workflowType` (the
`mlflow.experimentKind` tag is ignored), so the URL must carry it; the server must answer it.
"""

import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request

import pytest

from training import tracking


def _store(tmp_path) -> tuple[str, str]:
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    return uri, tracking.ensure_experiment(uri, "scaling-lab")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_print_url_names_the_experiment_and_the_training_view(tmp_path):
    uri, exp_id = _store(tmp_path)
    out = subprocess.run(
        [sys.executable, "-m", "sweeps.ui", "--tracking-uri", uri, "--print-url", "--port", "5001"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    url = f"http://127.0.0.1:5001/#/experiments/{exp_id}?workflowType=machine_learning"
    assert out.stdout.strip() == f"MLflow UI: {url}"


def test_no_store_is_one_error_line(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "sweeps.ui", "--tracking-uri", f"sqlite:///{tmp_path / 'no.db'}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f"error: --tracking-uri sqlite:///{tmp_path / 'no.db'}: no store there yet (run a sweep "
        "or `training.train` first)"
    ]
    assert not (tmp_path / "no.db").exists()


@pytest.mark.slow
def test_the_server_answers_the_printed_url_and_stops_with_the_command(tmp_path):
    uri, exp_id = _store(tmp_path)
    port = _free_port()
    ui = subprocess.Popen(
        [sys.executable, "-m", "sweeps.ui", "--tracking-uri", uri, "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = ui.stdout.readline()  # printed once the server answers
        url = re.search(r"http://\S+", line).group(0)
        assert (
            url == f"http://127.0.0.1:{port}/#/experiments/{exp_id}?workflowType=machine_learning"
        )
        page = urllib.request.urlopen(url.split("#")[0], timeout=30)  # the fragment is the UI's
        assert page.status == 200 and b"<html" in page.read().lower()
        api = f"http://127.0.0.1:{port}/api/2.0/mlflow/experiments/get?experiment_id={exp_id}"
        assert b'"scaling-lab"' in urllib.request.urlopen(api, timeout=30).read()
    finally:
        ui.send_signal(signal.SIGTERM)
        ui.wait(timeout=60)
    with pytest.raises(OSError):  # its server went with it
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    assert os.path.exists(tmp_path / "mlruns.db")
