"""Shared fixtures. Real parts (HTTP, S3, qemu-img) are started by the fixtures in
``tests/fixtures`` on 127.0.0.1 and torn down after use."""

pytest_plugins = [
    "tests.fixtures.plugin",
    "tests.fixtures.parallel",
    "tests.fixtures.prefetch",
]
