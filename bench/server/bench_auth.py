"""Credentials for the benchmarks (docs/protocol.md#tokens).

A ctune-server with tokens on by default makes <db>.tokens (admin, worker, viewer;
mode 0600) when it starts without --token-file, and refuses requests without
a token. An older build (--baseline) knows no tokens: no file appears and the
benchmarks send none."""
import json
import os


def read_tokens(db):
    """{"admin": ..., "worker": ..., "viewer": ...} from <db>.tokens, or {}
    when the server made none (an older build)."""
    out = {}
    try:
        with open(db + ".tokens") as f:
            for line in f:
                line = line.strip()
                if line and not line.startswith("#") and "=" in line:
                    k, v = line.split("=", 1)
                    out[k.strip()] = v.strip()
    except FileNotFoundError:
        pass
    return out


def bearer(token):
    """The Authorization header for token, or nothing (no token)."""
    return {"Authorization": "Bearer " + token} if token else {}


def register(call, tokens, name, resources):
    """Registers a worker with the shared worker token; (id, the credential
    for its later calls). The credential is the per-worker secret of the
    reply; an older build answers none and needs none."""
    st, body = call("POST", "/api/v1/workers", {"name": name, "resources": resources},
                    bearer(tokens.get("worker")))
    assert st == 201, (st, body)
    reply = json.loads(body)
    secret = reply.get("secret") if tokens else None
    return reply["id"], secret
