"""The HTTP endpoints driven by any ASGI 3 server: see :mod:`.application`."""

from .application import AsgiApplication

__all__ = ["AsgiApplication"]
