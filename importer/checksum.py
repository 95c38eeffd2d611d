"""Expected checksums ("sha256:<hex>") and the running hash over the bytes as fetched.

The hash is over what the source sent (a compressed image is hashed compressed), as users
publish checksums of the files they serve.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from vocab import sources

ALGORITHMS = sources.CHECKSUM_DIGEST_LENGTHS
_HEX = re.compile(r"^[0-9a-fA-F]+$")


@dataclass(frozen=True)
class Checksum:
    algorithm: str
    hexdigest: str

    def __str__(self) -> str:
        return f"{self.algorithm}:{self.hexdigest}"

    def hasher(self) -> hashlib._Hash:
        return hashlib.new(self.algorithm)

    def matches(self, hexdigest: str) -> bool:
        return self.hexdigest == hexdigest.lower()


def parse_checksum(text: str, *, field: str = "checksum") -> Checksum:
    """Parse "algo:hex".

    :raise ValueError: naming ``field`` and what is wrong with it.
    """
    algorithm, sep, digest = text.partition(":")
    # each part trimmed, as upstream's checksum.ParseAndValidate (the webhook accepts so)
    algorithm, digest = algorithm.strip().lower(), digest.strip()
    if not sep:
        raise ValueError(f"{field}: {text!r} is not of the form ALGORITHM:HEX")
    if algorithm not in ALGORITHMS:
        known = ", ".join(ALGORITHMS)
        raise ValueError(f"{field}: unsupported algorithm {algorithm!r} (expected one of {known})")
    if not _HEX.match(digest) or len(digest) != ALGORITHMS[algorithm]:
        raise ValueError(
            f"{field}: {algorithm} digest must be {ALGORITHMS[algorithm]} hex digits,"
            f" got {digest!r}"
        )
    return Checksum(algorithm, digest.lower())
