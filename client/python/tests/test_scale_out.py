"""Scale-out: one client over two replicas through round_robin, one stopped mid-run."""
import json
import re
import threading
import time
import urllib.request

import numpy as np
import pytest

import tensorops
from conftest import ServerProcess

_METRICS = re.compile(r"metrics: http://127\.0\.0\.1:(\d+)/metrics")
_GATHERS_OK = re.compile(r'tensorops_requests_total\{code="OK",device="cpu",op="gather"\} (\S+)')


def gathers_served(replica):
    port = next(int(m.group(1)) for m in map(_METRICS.search, list(replica.log)) if m)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        match = _GATHERS_OK.search(response.read().decode())
    return int(float(match.group(1))) if match else 0


def test_service_config():
    config = json.loads(tensorops.service_config())
    assert config["loadBalancingConfig"] == [{"round_robin": {}}]
    policy = config["methodConfig"][0]["retryPolicy"]
    assert policy["retryableStatusCodes"] == ["UNAVAILABLE", "CANCELLED", "ABORTED"]
    assert policy["maxAttempts"] == 5
    config = json.loads(tensorops.service_config(round_robin=False, max_attempts=1))
    assert config["loadBalancingConfig"] == [{"pick_first": {}}]
    assert "retryPolicy" not in config["methodConfig"][0]
    with pytest.raises(ValueError, match="max_attempts"):
        tensorops.service_config(max_attempts=6)


def test_round_robin_over_replicas_survives_one_stopping():
    replicas = [ServerProcess("--metrics_port=0", "--metrics_host=127.0.0.1") for _ in range(2)]
    try:
        target = "ipv4:" + ",".join(r.address for r in replicas)
        x = np.arange(6, dtype=np.int64).reshape(2, 3)
        index = np.array([[2, 0], [1, 1]])
        expected = np.take_along_axis(x, index, 1)
        with tensorops.Client(target, timeout=20) as client:
            for _ in range(200):
                np.testing.assert_array_equal(client.gather(x, 1, index), expected)
            deadline = time.monotonic() + 10
            while sum(map(gathers_served, replicas)) < 200 and time.monotonic() < deadline:
                time.sleep(0.01)
            served = [gathers_served(r) for r in replicas]
            assert sum(served) == 200 and min(served) >= 20, served

            failures, done = [], threading.Event()

            def call():
                while not done.is_set():
                    try:
                        client.gather(x, 1, index)
                    except tensorops.Error as e:
                        failures.append(e)

            threads = [threading.Thread(target=call) for _ in range(2)]
            for thread in threads:
                thread.start()
            time.sleep(0.3)
            replicas[0].stop()
            assert replicas[0].process.returncode == 0, "".join(replicas[0].log)
            time.sleep(0.5)
            done.set()
            for thread in threads:
                thread.join()
            assert failures == []
    finally:
        for replica in replicas:
            replica.stop()
