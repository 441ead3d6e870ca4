"""The runtime's failure (its own module so that every runtime module can raise it without importing the worker)."""


class RuntimeFailure(RuntimeError):
    """The parameter server refused or reported an error, or the run cannot go on."""
