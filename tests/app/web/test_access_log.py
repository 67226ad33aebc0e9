"""The access log keeps no secrets: a feed token in a URL (and a token pasted into any
query or referrer by mistake) is cut out before gunicorn writes the line."""

import time

from tests.tailnet import SERVE_HOST, WebServer, as_serve_sends, fetch

FEED_TOKEN = "cp_feedtoken_0123456789abcdef"


def test_tokens_never_reach_the_access_log(data_dir):
    server = WebServer(data_dir, COMMONPLACE_AUTH="serve", COMMONPLACE_OWNERS="o@x.test",
                       COMMONPLACE_FEED_TOKEN=FEED_TOKEN, COMMONPLACE_HOSTS=SERVE_HOST)
    try:
        status, _, _ = fetch(f"{server.base}/feed.atom?token={FEED_TOKEN}")
        assert status == 200
        # the same parameter, percent-encoded name and value: the app reads it as the token
        encoded = "".join(f"%{byte:02X}" for byte in FEED_TOKEN.encode())
        status, _, _ = fetch(f"{server.base}/feed.atom?%74oken={encoded}")
        assert status == 200
        status, _, _ = server.via_serve(  # the owner, through serve's socket
            "/search?q=x&token=cp_owner_secret_abcdefghij",
            {**as_serve_sends("o@x.test"),
             "Referer": f"{server.base}/feed.atom?token={FEED_TOKEN}",
             "User-Agent": f"reader/1.0 (token={FEED_TOKEN})"})
        assert status == 200
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "/search" not in server.log_path.read_text():
            time.sleep(0.1)
    finally:
        server.close()
    log = server.log_path.read_text()
    assert "/feed.atom?token=REDACTED" in log and "/search?q=x&token=REDACTED" in log
    assert FEED_TOKEN not in log and "cp_owner_secret" not in log
    assert "/feed.atom?%74oken=REDACTED" in log and encoded not in log
    assert '"reader/1.0 (token=REDACTED)"' in log  # the user agent, printed, redacted
