"""The access log keeps no secrets: a feed token in a URL (and a token pasted into any
query or referrer by mistake) is cut out before gunicorn writes the line."""

import time

from tests.tailnet import WebServer, fetch

FEED_TOKEN = "cp_feedtoken_0123456789abcdef"


def test_tokens_never_reach_the_access_log(data_dir):
    server = WebServer(data_dir, COMMONPLACE_AUTH="serve", COMMONPLACE_OWNERS="o@x.test",
                       COMMONPLACE_FEED_TOKEN=FEED_TOKEN)
    try:
        status, _, _ = fetch(f"{server.base}/feed.atom?token={FEED_TOKEN}")
        assert status == 200
        status, _, _ = fetch(f"{server.base}/search?q=x&token=cp_owner_secret_abcdefghij",
                             headers={"Referer": f"{server.base}/feed.atom?token={FEED_TOKEN}",
                                      "Tailscale-User-Login": "o@x.test"})
        assert status == 200
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "/search" not in server.log_path.read_text():
            time.sleep(0.1)
    finally:
        server.close()
    log = server.log_path.read_text()
    assert "/feed.atom?token=REDACTED" in log and "/search?q=x&token=REDACTED" in log
    assert FEED_TOKEN not in log and "cp_owner_secret" not in log
