"""Each tenant's request rate: a token bucket per tenant, refilled as time passes.

A tenant's ``rate_limit = { requests = N, per_seconds = S }`` lets it send N
requests at once and then one every S/N seconds; a request beyond that is
answered 429 with ``Retry-After``, the whole seconds until the bucket holds
one again. Buckets are keyed by tenant name, so a reloaded tenants file
that changes a limit takes effect at the next request, and every token of a
tenant shares its tenant's bucket.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from .._tenants._models import Tenant

__all__ = ["RateLimiter"]


class RateLimiter:
    """Token buckets by tenant name; ``clock`` is monotonic seconds."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # name -> (tokens, when)

    def wait(self, tenant: Tenant) -> int:
        """Takes one request from the tenant's bucket: 0 if it may go on, else the
        whole seconds (at least 1) after which one may."""
        limit = tenant.rate_limit
        if limit is None:
            self._buckets.pop(tenant.name, None)
            return 0
        now = self._clock()
        rate = limit.requests / limit.per_seconds  # requests a second
        tokens, then = self._buckets.get(tenant.name, (float(limit.requests), now))
        tokens = min(float(limit.requests), tokens + (now - then) * rate)
        if tokens >= 1.0:
            self._buckets[tenant.name] = (tokens - 1.0, now)
            return 0
        self._buckets[tenant.name] = (tokens, now)
        return max(1, math.ceil((1.0 - tokens) / rate))
