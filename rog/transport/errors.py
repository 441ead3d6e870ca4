"""The transport's exceptions (a peer that breaks the protocol, a refused handshake, a closed link, a timeout)."""


class TransportError(Exception):
    """Base class of every transport failure."""


class ProtocolError(TransportError, ValueError):
    """The peer sent bytes that break the protocol; the connection cannot be trusted any more."""


class HandshakeError(TransportError):
    """Connection setup was refused (wrong secret, wrong version, wrong role) or timed out."""


class LinkClosed(TransportError, ConnectionError):
    """The connection ended (peer closed it, reset it, or said bye)."""


class TransportTimeout(TransportError, TimeoutError):
    """Nothing arrived within the allowed time."""
