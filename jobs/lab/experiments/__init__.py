"""Experiments: each module has ``run(ctx, params) -> dict`` (the result, on rank 0)."""
