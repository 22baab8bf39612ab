"""`child_process.serve`: the request loop shared by the learner process and the engine processes."""

import threading
from multiprocessing import Pipe

from ulorl.child_process import serve


class Unpicklable(Exception):
    def __reduce__(self):
        raise TypeError("cannot pickle this exception")


def _handle(msg):
    if msg[0] == "add":
        return msg[1] + msg[2]
    if msg[0] == "unpicklable":
        raise Unpicklable("no")
    if msg[0] == "unpicklable value":
        return lambda: None
    raise ValueError(f"unknown message {msg[0]!r}")


def _start(error_replies):
    driver, child = Pipe()
    t = threading.Thread(target=serve, args=(child, _handle, error_replies), daemon=True)
    t.start()
    return driver, child, t


def test_replies_ok_or_the_first_error_reply_that_can_be_sent_and_ends_on_close():
    driver, _, t = _start(lambda e, tb: [("error", e, tb), ("error", None, tb)])
    driver.send(("add", 2, 3))
    assert driver.recv() == ("ok", 5)
    driver.send(("nope",))
    status, e, tb = driver.recv()
    assert status == "error" and isinstance(e, ValueError) and "unknown message 'nope'" in tb
    driver.send(("unpicklable",))  # the exception cannot cross the pipe: its traceback alone does
    status, e, tb = driver.recv()
    assert (status, e) == ("error", None) and "Unpicklable" in tb
    driver.send(("unpicklable value",))  # a value that cannot cross: an error reply instead
    status, e, tb = driver.recv()
    assert status == "error" and "pickle" in tb.lower()
    driver.send(("add", 1, 1))  # still serving
    assert driver.recv() == ("ok", 2)
    driver.send(("close",))
    t.join(timeout=60)
    assert not t.is_alive()


def test_the_loop_ends_when_the_driver_is_gone():
    driver, child, t = _start(lambda e, tb: [("error", tb)])
    driver.send(("add", 1, 2))
    assert driver.recv() == ("ok", 3)
    driver.close()
    t.join(timeout=60)
    assert not t.is_alive()
