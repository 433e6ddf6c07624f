"""Reference servers the benchmark measures mcplite against (each runs as its own process)."""
