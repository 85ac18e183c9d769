"""An emulator of the Azure Retail Prices API (`GET /api/retail/prices`), for tests and demos.

Serves a list of rows with the API's envelope (`BillingCurrency`, `Items`, `NextPageLink`,
`Count`), pages of `page_size` rows linked by `$skip`, and the `$filter` forms clients use:
`field eq 'value'` and `contains(field, 'text')` joined by `and` (case-sensitive, as the API is
from 2023-01-01-preview on). Faults can be injected: an error status or a broken body for the
next requests.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

# Filter names that differ from the rows' field names (filter `priceType`, row `type`).
FIELD_ALIASES = {"priceType": "type"}
_EQ = re.compile(r"^(\w+)\s+eq\s+'([^']*)'$")
_CONTAINS = re.compile(r"^contains\((\w+),\s*'([^']*)'\)$")


def row_matches(row: Mapping[str, Any], odata_filter: str) -> bool:
    """Evaluate the supported `$filter` subset; raise ValueError on anything else."""
    if not odata_filter.strip():
        return True
    for raw in re.split(r"\s+and\s+", odata_filter.strip()):
        term = raw.strip()
        if match := _EQ.match(term):
            name = FIELD_ALIASES.get(match.group(1), match.group(1))
            if str(row.get(name, "")) != match.group(2):
                return False
        elif match := _CONTAINS.match(term):
            name = FIELD_ALIASES.get(match.group(1), match.group(1))
            if match.group(2) not in str(row.get(name, "")):
                return False
        else:
            raise ValueError(f"unsupported filter term {term!r}")
    return True


@dataclass
class RetailPricesEmulator:
    rows: list[dict[str, Any]] = field(default_factory=list)
    page_size: int = 100
    failures: list[int] = field(default_factory=list)  # statuses for the next requests; 0: garbage
    requests: int = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/api/retail/prices", self._prices)
        return app

    async def _prices(self, request: web.Request) -> web.Response:
        self.requests += 1
        if self.failures:
            status = self.failures.pop(0)
            if status == 0:
                return web.Response(text='{"Items": [', content_type="application/json")
            return web.json_response({"error": {"message": "injected"}}, status=status)
        odata_filter = request.query.get("$filter", "")
        try:
            skip = int(request.query.get("$skip", "0"))
            matching = [row for row in self.rows if row_matches(row, odata_filter)]
        except ValueError as exc:
            return web.json_response({"Error": {"Message": str(exc)}}, status=400)
        page = matching[skip : skip + self.page_size]
        next_link = None
        if skip + self.page_size < len(matching):
            query = {"$filter": odata_filter, "$skip": str(skip + self.page_size)}
            next_link = f"{request.url.origin()}{request.path}?{urlencode(query)}"
        return web.json_response(
            {
                "BillingCurrency": "USD",
                "CustomerEntityId": "Default",
                "CustomerEntityType": "Retail",
                "Items": page,
                "NextPageLink": next_link,
                "Count": len(page),
            }
        )
