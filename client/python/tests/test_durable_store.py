"""The durable store (--store_dir) under kill -9: 16 clients push in-place SUMs with update ids,
overwrite and delete tensors while the server is killed at random moments and restarted on the
same directory. After each restart every acknowledged change is there (with
--store_sync=interval, every acknowledged put and delete, and every in-place push acknowledged
longer than the interval before the kill: younger ones may still have been queued for the log's
writer, and then the state is that of an earlier push, never a later push without an earlier
one), the one change each client had in flight is either wholly there or wholly absent (never
half-applied, never at a wrong version), and its retry with the same update id applies it
exactly once.

Runs as its own ctest entry (durable_store_crash), not within python_client."""
import collections
import random
import threading
import time

import grpc
import numpy as np
import pytest

import tensorops
from conftest import ServerProcess
from tensorops.v1 import service_pb2_grpc, store_pb2

CLIENTS = 16
ROWS = 8
SYNC_INTERVAL_S = 0.1  # the server's default --store_sync_interval_ms
# What a loaded 2-core machine may add to it before a queued push is written.
SCHEDULING_SLACK_S = 1.0


class Worker:
    """One client's tensors and what it knows of them: the acknowledged state, and the change
    in flight (sent, not answered) when the server died."""

    def __init__(self, k, seed):
        self.k = k
        self.rng = np.random.default_rng(seed)
        self.acc = f"crash/{k}/acc"
        self.blob = f"crash/{k}/blob"
        self.acc_values = np.zeros(ROWS, np.int64)
        self.acc_version = 1
        # (version, values, when acknowledged) of the last pushes: what a restart after a kill
        # may go back to under --store_sync=interval.
        self.acc_history = collections.deque(
            [(self.acc_version, self.acc_values.copy(), 0.0)], maxlen=4096)
        self.blob_state = None          # (value, version) or None when deleted / never stored
        self.pending_push = None        # (update_id, index, src)
        self.pending_blob = None        # ("put", value) or ("delete",)
        self.counter = 0
        self.acknowledged = 0
        self.lost_pushes = 0

    def run(self, address, stop):
        with tensorops.Client(address, timeout=10, max_attempts=2) as client:
            while not stop.is_set():
                self.counter += 1
                choice = self.rng.random()
                try:
                    if choice < 0.7:
                        self.push(client)
                    elif choice < 0.9 or self.blob_state is None:
                        self.put(client)
                    else:
                        self.delete(client)
                except tensorops.Error:
                    return  # the server died: what is pending stays pending
                self.acknowledged += 1

    def push(self, client):
        update_id = f"{self.k}-{self.counter}-{self.rng.integers(1 << 40):x}"
        index = self.rng.integers(0, ROWS, 16)              # duplicate-heavy
        src = self.rng.integers(-9, 10, 16).astype(np.int64)
        self.pending_push = (update_id, index, src)
        result = client.scatter_reduce(tensorops.Ref(self.acc), 0, index, src, "sum",
                                       in_place=True, update_id=update_id)
        assert result.version == self.acc_version + 1, (result, self.acc_version)
        self.apply_push()

    def apply_push(self):
        _, index, src = self.pending_push
        np.add.at(self.acc_values, index, src)
        self.acc_version += 1
        self.pending_push = None
        self.acc_history.append((self.acc_version, self.acc_values.copy(), time.monotonic()))

    def rewind_lost_pushes(self, version, killed_at):
        """Under --store_sync=interval: the restart found the accumulator at `version`, before
        the last acknowledged pushes. Those must all be younger than the interval (with slack)
        at the kill; the client then knows the accumulator as of `version`."""
        kept = [entry for entry in self.acc_history if entry[0] == version]
        assert kept, (self.k, version, self.acc_version)
        lost = [entry for entry in self.acc_history if entry[0] > version]
        oldest_lost = min(entry[2] for entry in lost)
        assert killed_at - oldest_lost <= SYNC_INTERVAL_S + SCHEDULING_SLACK_S, (
            self.k, version, self.acc_version, killed_at - oldest_lost)
        while self.acc_history[-1][0] > version:
            self.acc_history.pop()
        self.acc_version, self.acc_values = version, kept[0][1].copy()
        self.lost_pushes += len(lost)

    def put(self, client):
        value = self.counter
        self.pending_blob = ("put", value)
        ref = client.put(self.blob, np.full(64, value, np.int32), overwrite=True)
        self.blob_state = (value, ref.version)
        self.pending_blob = None

    def delete(self, client):
        self.pending_blob = ("delete",)
        client.delete(self.blob)
        self.blob_state = None
        self.pending_blob = None

    def check(self, client, sync, killed_at=None):
        """After a restart: the state is the acknowledged one, or that plus the pending change
        (under --store_sync=interval, maybe an earlier push's when the kill came right after the
        last pushes); the pending push's retry applies it exactly once."""
        got = client.get(self.acc)
        version = client.info(self.acc).version
        if version < self.acc_version:
            assert sync == "interval" and killed_at is not None, (self.k, version,
                                                                   self.acc_version)
            # The queue is written in order: the push in flight came after the lost ones.
            self.rewind_lost_pushes(version, killed_at)
            np.testing.assert_array_equal(got, self.acc_values)
        if self.pending_push is None:
            assert version == self.acc_version, (self.k, version, self.acc_version)
            np.testing.assert_array_equal(got, self.acc_values)
        else:
            update_id, index, src = self.pending_push
            applied = self.acc_values.copy()
            np.add.at(applied, index, src)
            if version == self.acc_version:
                np.testing.assert_array_equal(got, self.acc_values)
            else:
                assert version == self.acc_version + 1, (self.k, version, self.acc_version)
                np.testing.assert_array_equal(got, applied)
            retried = client.scatter_reduce(tensorops.Ref(self.acc), 0, index, src, "sum",
                                            in_place=True, update_id=update_id)
            assert retried.version == self.acc_version + 1
            np.testing.assert_array_equal(client.get(self.acc), applied)
            self.apply_push()

        try:
            info = client.info(self.blob)
            blob = (int(client.get(self.blob)[0]), info.version)
            assert (client.get(self.blob) == blob[0]).all()
        except tensorops.NotFound:
            blob = None
        allowed = [self.blob_state]
        if self.pending_blob is not None:
            if self.pending_blob[0] == "delete":
                allowed.append(None)
            else:
                version = self.blob_state[1] + 1 if self.blob_state else 1
                allowed.append((self.pending_blob[1], version))
        assert blob in allowed, (self.k, blob, allowed)
        self.blob_state = blob
        self.pending_blob = None


def snapshot_after(address, delay):
    """Asks for a snapshot `delay` seconds from now (it may be cut short by the kill)."""
    time.sleep(delay)
    with grpc.insecure_channel(address) as channel:
        try:
            service_pb2_grpc.TensorOpsStub(channel).SnapshotStore(
                store_pb2.SnapshotStoreRequest(), timeout=10)
        except grpc.RpcError:
            pass


def recovery_line(server):
    lines = [line for line in server.log if "store recovery:" in line and "tensors" in line]
    assert lines, "".join(server.log)
    return lines[-1]


@pytest.mark.parametrize("sync,kills", [("always", 20), ("interval", 5)])
def test_kill_9_under_load_keeps_what_the_sync_mode_promises(tmp_path, sync, kills):
    flags = (f"--store_dir={tmp_path / 'store'}", f"--store_sync={sync}",
             "--store_snapshot_interval_s=1")
    rng = random.Random(20261127)
    workers = [Worker(k, seed=1000 + k) for k in range(CLIENTS)]
    server = ServerProcess(*flags)
    with tensorops.Client(server.address, timeout=10) as client:
        for worker in workers:
            client.put(worker.acc, worker.acc_values)
    snapshots_loaded = 0
    for round_ in range(kills):
        stop = threading.Event()
        threads = [threading.Thread(target=worker.run, args=(server.address, stop))
                   for worker in workers]
        # Every other round a snapshot starts while the clients run (the periodic ones every
        # second come in the longer rounds): recovery then reads a snapshot and the logs after
        # it, or finds a snapshot the kill cut short.
        run_for = rng.uniform(0.2, 1.5)
        if round_ % 2 == 1:
            threads.append(threading.Thread(target=snapshot_after,
                                            args=(server.address, rng.uniform(0, run_for))))
        for thread in threads:
            thread.start()
        time.sleep(run_for)
        killed_at = time.monotonic()
        server.process.kill()  # SIGKILL: no shutdown, no last snapshot
        server.process.wait()
        stop.set()
        for thread in threads:
            thread.join(30)
            assert not thread.is_alive()
        server = ServerProcess(*flags)
        line = recovery_line(server)
        assert " 0 failed" in line, line
        snapshots_loaded += "snapshot none" not in line
        with tensorops.Client(server.address, timeout=10) as client:
            for worker in workers:
                worker.check(client, sync, killed_at)
            # Nothing else: each client's names and nothing more.
            names = {info.name for info in client.list()}
            expected = {w.acc for w in workers} | {w.blob for w in workers if w.blob_state}
            assert names == expected
    assert sum(worker.acknowledged for worker in workers) > 100 * kills
    print(f"--store_sync={sync}: {sum(w.acknowledged for w in workers)} changes acknowledged, "
          f"{sum(w.lost_pushes for w in workers)} pushes lost young at {kills} kills")
    assert snapshots_loaded > 0
    server.stop()
    assert server.process.returncode == 0, "".join(server.log)
    # A graceful stop writes a last snapshot: the next start replays no log record.
    server = ServerProcess(*flags)
    assert " 0 records replayed" in recovery_line(server)
    with tensorops.Client(server.address, timeout=10) as client:
        for worker in workers:
            worker.check(client, sync)
    server.stop()
