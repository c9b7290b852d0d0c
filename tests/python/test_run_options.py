"""RunOptions (terminate, timeout_seconds) and the host memory budget, through the Python API:
each stops a run with a clear onyx.Error, and the session runs the next call as before."""
import threading
import time

import numpy as np
import pytest


@pytest.fixture
def onyx():
    import onyx
    return onyx


def test_terminate_stops_runs_and_can_be_cleared(onyx, models, feed_for):
    sess = onyx.InferenceSession(models["big"])
    feed = feed_for("big", batch=256)
    want = sess.run(None, feed)[0]
    opts = onyx.RunOptions()
    opts.terminate = True
    with pytest.raises(onyx.Error, match="cancelled"):
        sess.run(None, feed, opts)
    opts.terminate = False
    assert np.array_equal(sess.run(None, feed, opts)[0], want)
    # set from another thread while runs go on: one of them stops
    stopped = []

    def runs():
        try:
            for _ in range(200):
                sess.run(None, feed, opts)
        except onyx.Error as e:
            stopped.append(str(e))
    t = threading.Thread(target=runs)
    t.start()
    time.sleep(0.05)
    opts.terminate = True
    t.join(timeout=60)
    assert not t.is_alive() and stopped and "cancelled" in stopped[0]
    assert np.array_equal(sess.run(None, feed)[0], want)


def test_timeout_is_a_deadline_per_run(onyx, models, feed_for):
    sess = onyx.InferenceSession(models["big"])
    feed = feed_for("big", batch=256)
    want = sess.run(None, feed)[0]
    opts = onyx.RunOptions()
    opts.timeout_seconds = 1e-6
    with pytest.raises(onyx.Error, match="deadline"):
        sess.run(None, feed, opts)
    opts.timeout_seconds = 60
    assert np.array_equal(sess.run(None, feed, opts)[0], want)


def test_host_memory_budget_refuses_and_names_the_value(onyx, models, feed_for):
    so = onyx.SessionOptions()
    so.host_memory_budget_bytes = 1 << 20  # 1 MiB: the big model's activations need more
    sess = onyx.InferenceSession(models["big"], so)
    feed = feed_for("big", batch=256)
    with pytest.raises(onyx.Error, match="host memory budget") as e:
        sess.run(None, feed)
    assert "needs" in str(e.value)
    small = feed_for("big", batch=1)  # 4 KiB rows fit
    ref = onyx.InferenceSession(models["big"]).run(None, small)[0]
    assert np.array_equal(sess.run(None, small)[0], ref)


def test_profile_lists_each_node_that_ran(onyx, models, feed_for):
    sess = onyx.InferenceSession(models["big"])
    feed = feed_for("big", batch=64)
    want = sess.run(None, feed)[0]
    assert sess.last_run_stats()["nodes"] == []  # not profiled
    opts = onyx.RunOptions()
    opts.profile = True
    assert np.array_equal(sess.run(None, feed, opts)[0], want)
    stats = sess.last_run_stats()
    nodes = stats["nodes"]
    assert nodes, "a profiled run lists its nodes"
    for n in nodes:
        assert n["node"].startswith("node ") and n["op"] in n["node"] and n["seconds"] > 0
    assert sum(n["seconds"] for n in nodes) <= stats["seconds"]
