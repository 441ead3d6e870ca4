"""The runtime's failure and the parameter server's waits (their own module so that every runtime module can use them
without importing the worker or the server)."""

POLL_S = 0.25  # how often a waiting parameter-server thread wakes to check for a stop request


class RuntimeFailure(RuntimeError):
    """The parameter server refused or reported an error, or the run cannot go on."""


class Stopped(Exception):
    """The parameter server is stopping; a waiting thread gives up."""


class Superseded(Exception):
    """The worker came back on a newer connection; the thread of the old one gives up."""
