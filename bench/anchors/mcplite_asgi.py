"""mcplite's ASGI app (``mcplite.asgi.App``) under uvicorn, as a user would deploy it.

The demo tools, their dispatcher assembled as ``mcplite serve`` assembles it
(promise secret, metrics, mcplite's access log on, to the log file like the
``mcplite`` row's), served by uvicorn with one worker and its own access log off.
The same endpoints as ``mcplite serve``: ``POST /mcp-lite/v1/calltools`` and
``POST /mcp``; the row beside ``mcplite`` shows what the ASGI path costs.

Run: ``python bench/anchors/mcplite_asgi.py --port 8080``
"""

from __future__ import annotations

import argparse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    import uvicorn

    import mcplite.demo
    from mcplite import Config
    from mcplite.asgi import App
    from mcplite.ops.logs import setup_logging
    from mcplite.ops.serve import build_dispatcher

    setup_logging("info")
    dispatcher = build_dispatcher(mcplite.demo.tools, Config())
    app = App(dispatcher=dispatcher, prompts=mcplite.demo.prompts, resources=mcplite.demo.resources)
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        workers=1,
        access_log=False,
        log_config=None,
        log_level="warning",
    )


if __name__ == "__main__":
    main()
