"""Pulse's own check and failure filter for schemathesis runs (tests/schemathesis_test.go).

Pulse answers 503 with Retry-After when an answer cannot be given yet and will be
soon: state being rebuilt, a past instant whose rows are not final, a history store
that does not answer. That is the documented, retryable answer, not a fault; any
other 5xx, or a 503 without Retry-After, is one. The run replaces schemathesis's own
not_a_server_error with no_unexplained_server_error.

Some bounds the document states cannot be written as JSON Schema: an occurredAt
within five minutes of the server's clock; an at= within the retention before now; from
before to, in a range no longer than the route's span; a day from 1970 to 9998; an id of
at most 128 bytes (its schema is the pattern alone: the generator cannot join a length
to it); an activeWithin above 0, at most 24h and not with at=; at most 100 ids with at=;
invisible users listed only in the operator view; a cursor the service handed out; a
user named in both add and remove of a group's PATCH; a group's concurrency over at
most a day from within the at= retention; a
custom status's text of at most 128 characters (a pattern alone, as ids), its until in
the future and at most 30 days ahead, and its emoji exactly one emoji of at most 32
bytes. A schema-valid request that breaks one of them is refused with a 400 naming the field;
filter_failure drops that "schema-valid request rejected" failure only after checking,
independently of the service, that the request really breaks the bound the 400 names.
The document's own examples are checked apart (checkExamples in
tests/openapi_examples_test.go): schemathesis's examples phase fills what an example
leaves out with values of its own.
"""

import json
import re
import threading
import unicodedata
from datetime import date, datetime, timedelta, timezone

import schemathesis

# The bounds as docs/configuration.md and the OpenAPI document give their defaults.
MAX_SKEW = timedelta(minutes=5)  # PULSE_INGEST_MAX_SKEW
AT_RETENTION = timedelta(days=30)  # PULSE_QUERY_AT_RETENTION
AT_MAX_BATCH = 100  # PULSE_QUERY_AT_MAX_BATCH
MAX_ID_BYTES = 128  # user, device and event ids
MAX_TEXT_CHARS = 128  # presence.MaxCustomText
CUSTOM_AHEAD = timedelta(days=30)  # presence.MaxCustomAhead
MAX_EMOJI_BYTES = 32  # presence.MaxCustomEmoji
# Each history route's longest range (the operation descriptions' "At most N days").
SPANS = {
    "/v1/users/{userId}/timeline": 31,
    "/v1/users/{userId}/sessions": 400,
    "/v1/users/{userId}/daily": 400,
    "/v1/stats/concurrency": 31,
    "/v1/stats/uniques": 400,
}
DAY_RANGES = {"/v1/users/{userId}/daily"}  # from and to are days, both included
EARLIEST = datetime(1970, 1, 1, tzinfo=timezone.utc)
LATEST = datetime(9999, 1, 1, tzinfo=timezone.utc)
# Near a bound the clocks of this process and the service may disagree.
MARGIN = timedelta(seconds=5)

_cursors = set()  # every nextCursor / cursor the services answered with
_lock = threading.Lock()


@schemathesis.check
def no_unexplained_server_error(ctx, response, case):
    if response.status_code < 500:
        return None
    headers = {name.lower(): value for name, value in response.headers.items()}
    if response.status_code == 503 and headers.get("retry-after"):
        return None
    raise AssertionError(
        f"{response.status_code} is a server error and not a 503 with Retry-After"
    )


@schemathesis.hook
def after_call(context, case, response):
    """Remembers the cursors the services hand out: only those are valid."""
    try:
        body = json.loads(response.content)
    except (ValueError, TypeError):
        return
    if isinstance(body, dict):
        for key in ("nextCursor", "cursor"):
            if isinstance(body.get(key), str):
                with _lock:
                    _cursors.add(body[key])


@schemathesis.hook
def filter_failure(context, failure, case, response):
    if failure.code != "ST202" or response.status_code != 400:
        return True
    try:
        field = json.loads(response.content)["error"].get("field") or ""
    except (ValueError, KeyError, TypeError, AttributeError):
        return True
    return not breaks_stated_bound(case, field, datetime.now(timezone.utc))


def breaks_stated_bound(case, field, now):
    """Whether the request breaks the bound the 400 names (see the module's doc)."""
    query = case.query or {}
    path = case.operation.path
    if re.fullmatch(r"(events\[\d+\]\.)?(userId|deviceId|eventId)|(userIds|add|remove)\[\d+\]", field):
        if re.fullmatch(r"(userIds|add|remove)\[\d+\]", field) and named_twice(case, field):
            return True
        # An id: at most 128 bytes of UTF-8; the schema's pattern cannot say how many.
        value = field_value(case, field)
        return isinstance(value, str) and len(value.encode()) > MAX_ID_BYTES
    if field == "occurredAt" or re.fullmatch(r"events\[\d+\]\.occurredAt", field):
        t = instant(field_value(case, field))
        return t is not None and abs(now - t) > MAX_SKEW - MARGIN
    if re.fullmatch(r"events\[\d+\]\.data\.until", field):
        t = instant(field_value(case, field))
        return t is not None and (t < now + MARGIN or t > now + CUSTOM_AHEAD - MARGIN)
    if re.fullmatch(r"events\[\d+\]\.data\.text", field):
        # At most 128 characters; the schema's pattern cannot say how many.
        value = field_value(case, field)
        return isinstance(value, str) and len(value) > MAX_TEXT_CHARS
    if re.fullmatch(r"events\[\d+\]\.data\.emoji", field):
        return not is_one_emoji(field_value(case, field))
    if field == "at":
        t = instant(query.get("at"))
        return t is not None and (t > now - MARGIN or t < now - AT_RETENTION + MARGIN)
    if field == "userIds" and "at" in query:
        ids = (case.body or {}).get("userIds") if isinstance(case.body, dict) else None
        return isinstance(ids, list) and len(ids) > AT_MAX_BATCH
    if field == "cursor":
        with _lock:
            return query.get("cursor") not in _cursors
    if field in ("from", "to") and path == "/v1/stats/concurrency" and "group" in query:
        return group_range_out_of_bounds(query, now)
    if field in ("from", "to") and path in SPANS:
        return range_out_of_bounds(path, query, now)
    if field == "day":
        d = day(query.get("day"))
        return d is not None and (d < EARLIEST or d >= LATEST)
    if field == "activeWithin":
        if "at" in query:
            return True  # activity is known for the present only
        d = go_duration(query.get("activeWithin"))
        return d is not None and (d <= timedelta(0) or d > timedelta(hours=24))
    if field == "status" and path in ("/v1/online", "/v1/groups/{groupId}/online"):
        return query.get("status") == "invisible" and query.get("view") != "operator"
    return False


def named_twice(case, field):
    """Whether the id at field of a group write's body is named before it too (in
    add, or earlier in its own list): the service refuses it, naming the later one."""
    body = case.body if isinstance(case.body, dict) else {}
    name, index = re.fullmatch(r"(\w+)\[(\d+)\]", field).groups()
    index = int(index)
    ids = body.get(name)
    if not isinstance(ids, list) or index >= len(ids):
        return False
    before = list(ids[:index])
    if name == "remove" and isinstance(body.get("add"), list):
        before += body["add"]
    return ids[index] in before


# One emoji, by its shape alone (a narrower rule than the service's, so that what it
# accepts the service must accept): a flag (two regional indicators), a keycap, or
# pictographs of U+1F300..U+1FAFF (every one Extended_Pictographic, so a ZWJ sequence
# of them is one grapheme cluster), each with an optional variation selector, skin
# tone and tags.
_PICT = r"[\U0001F300-\U0001F3FA\U0001F400-\U0001FAFF]"
_ELEM = _PICT + r"\uFE0F?[\U0001F3FB-\U0001F3FF]?\uFE0F?[\U000E0020-\U000E007F]*"
_EMOJI = re.compile(
    r"[\U0001F1E6-\U0001F1FF]{2}|[0-9#*]\uFE0F?\u20E3|" + _ELEM + r"(?:\u200D" + _ELEM + r")*"
)


def is_one_emoji(value):
    if not isinstance(value, str) or len(value.encode("utf-8", "surrogatepass")) > MAX_EMOJI_BYTES:
        return False
    if not _EMOJI.fullmatch(value):
        return False
    return all(
        unicodedata.category(c) == "So" for c in value if 0x1F300 <= ord(c) <= 0x1FAFF and not 0x1F3FB <= ord(c) <= 0x1F3FF
    )


def range_out_of_bounds(path, query, now):
    days = path in DAY_RANGES
    parse = day if days else time_or_day
    values = {}
    for name in ("from", "to"):
        if name in query:
            t = parse(query[name])
            if t is None:
                return False  # a malformed value is the schema's business
            if t < EARLIEST or t >= LATEST:
                return True
            values[name] = t
    to = values.get("to")
    if to is None:
        to = datetime(now.year, now.month, now.day, tzinfo=timezone.utc) if days else now
    frm = values.get("from")
    if frm is None:
        return False  # the default span fits every route's bound
    if days:
        return frm > to or (to - frm).days + 1 > SPANS[path]
    return frm >= to or to - frm > timedelta(days=SPANS[path])


def group_range_out_of_bounds(query, now):
    """A group's concurrency: at most a day, from within the at= retention."""
    frm = time_or_day(query["from"]) if "from" in query else None
    to = time_or_day(query["to"]) if "to" in query else now
    if ("from" in query and frm is None) or to is None:
        return False  # a malformed value is the schema's business
    if frm is None:
        frm = to - timedelta(hours=1)
    return (frm >= to or to - frm > timedelta(days=1) or frm < now - AT_RETENTION + MARGIN
            or frm < EARLIEST or to >= LATEST)


def field_value(case, field):
    """The value a 400's field names: a body member ("events[2].userId",
    "userIds[7]", "deviceId"), else a path or query parameter."""
    cur = case.body
    for name, index in re.findall(r"([A-Za-z]+)(?:\[(\d+)\])?", field):
        if not isinstance(cur, dict) or name not in cur:
            cur = None
            break
        cur = cur[name]
        if index:
            i = int(index)
            cur = cur[i] if isinstance(cur, list) and i < len(cur) else None
    if cur is not None:
        return cur
    for params in (case.path_parameters, case.query):
        if params and field in params:
            return params[field]
    return None


def instant(value):
    if not isinstance(value, str):
        return None
    try:
        t = datetime.fromisoformat(value)
    except ValueError:
        return None
    if t.tzinfo is None:
        return None
    try:
        return t.astimezone(timezone.utc)
    except OverflowError:  # before year 1 in UTC: older than any bound
        return datetime(1, 1, 1, tzinfo=timezone.utc)


def day(value):
    try:
        d = date.fromisoformat(value)
    except (TypeError, ValueError):
        return None
    return datetime(d.year, d.month, d.day, tzinfo=timezone.utc)


def time_or_day(value):
    if isinstance(value, str) and "T" in value.upper():
        return instant(value)
    return day(value)


_UNITS = {"ns": 1e-3, "us": 1, "µs": 1, "μs": 1, "ms": 1e3, "s": 1e6, "m": 60e6, "h": 3600e6}
_TERM = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)")


def go_duration(value):
    """A Go duration string (time.ParseDuration's grammar) as a timedelta."""
    if not isinstance(value, str):
        return None
    sign, rest = 1, value
    if rest[:1] in "+-" and rest:
        sign, rest = (-1 if rest[0] == "-" else 1), rest[1:]
    if rest == "0":
        return timedelta(0)
    micros, pos = 0.0, 0
    for m in _TERM.finditer(rest):
        if m.start() != pos:
            return None
        micros += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(rest) or pos == 0:
        return None
    try:
        return sign * timedelta(microseconds=micros)
    except OverflowError:
        return timedelta.max if sign > 0 else timedelta.min
