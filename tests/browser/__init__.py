"""Tests in a real browser (a package, like ``clients``: its modules are
``browser.*``, beside the suite's own ``conftest``)."""
