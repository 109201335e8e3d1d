"""Cron expressions in a time zone: ``Cron`` and its slots. No Django import.

Parsing and stepping are cronsim's (a maintained, dependency-free parser that
follows Debian cron's rules, including its daylight-saving rules); this module only
fixes what a slot means for us: an aware datetime in the schedule's time zone.

Daylight saving (Debian cron's rules, which cronsim implements for 5-field
expressions with a fixed minute and hour): a slot whose local time does not exist
(02:30 on a spring-forward night) starts at the first minute that exists after it
(03:00); a fixed local time that happens twice (01:30 on a fall-back night) starts
once, at its first occurrence. Expressions with ``*`` in the minute or hour field
follow real time: every real minute (or hour) is a slot, also in the repeated hour.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..exceptions import InvalidSchedule

FIELDS = "minute hour day-of-month month day-of-week"


@dataclass(frozen=True)
class Cron:
    """A cron expression (5 fields) and the time zone its times are in.

    >>> Cron("0 9 * * 1", timezone="Europe/Paris").next_after(
    ...     datetime(2026, 3, 1, tzinfo=UTC)).isoformat()
    '2026-03-02T09:00:00+01:00'

    ``timezone=None`` means the project's ``TIME_ZONE`` (resolved when the schedule
    is stored).
    """

    expr: str
    timezone: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "expr", check_expr(self.expr))
        if self.timezone is not None:
            zone(self.timezone)

    def describe(self) -> str:
        """In the worker's banner: ``cron "0 9 * * 1" in Europe/Paris``."""
        return f'cron "{self.expr}"' + (f" in {self.timezone}" if self.timezone else "")

    def in_zone(self, default: str) -> ZoneInfo:
        return zone(self.timezone or default)

    def next_after(self, after: datetime, default_zone: str = "UTC") -> datetime:
        return next_slot(self.expr, self.in_zone(default_zone), after)


def check_expr(expr: object) -> str:
    """``expr`` normalized (single spaces), or ``InvalidSchedule`` saying what is wrong."""
    if not isinstance(expr, str):
        raise InvalidSchedule(f"a cron expression must be a string, got {expr!r}")
    fields = expr.split()
    if len(fields) != 5:
        raise InvalidSchedule(
            f"cron expression {expr!r} has {len(fields)} field(s); write 5: {FIELDS}, "
            'e.g. "0 9 * * 1" (09:00 every Monday)'
        )
    normal = " ".join(fields)
    from cronsim import CronSim, CronSimError

    try:
        CronSim(normal, datetime(2026, 1, 1, tzinfo=UTC))
    except CronSimError as exc:
        raise InvalidSchedule(f"cron expression {expr!r}: {exc} ({FIELDS})") from None
    try:
        next_slot(normal, ZoneInfo("UTC"), datetime(2026, 1, 1, tzinfo=UTC))
    except InvalidSchedule:
        raise InvalidSchedule(f"cron expression {expr!r} never matches a date") from None
    return normal


def zone(name: object) -> ZoneInfo:
    """The ``ZoneInfo`` named ``name``, or ``InvalidSchedule``."""
    if not isinstance(name, str) or not name:
        raise InvalidSchedule(f"a time zone must be a name such as 'Europe/Paris', got {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidSchedule(
            f"unknown time zone {name!r}; use an IANA name such as 'Europe/Paris' or 'UTC'"
        ) from None


def next_slot(expr: str, tz: ZoneInfo, after: datetime) -> datetime:
    """The first slot strictly after ``after`` (aware), in ``tz``."""
    from cronsim import CronSim

    try:
        return next(CronSim(expr, after.astimezone(tz)))
    except StopIteration:
        raise InvalidSchedule(f"cron expression {expr!r} has no slot after {after}") from None


def latest_slot(expr: str, tz: ZoneInfo, now: datetime) -> datetime:
    """The last slot at or before ``now``: the one slot to start after missed ones."""
    from cronsim import CronSim

    # cronsim steps one second back before it looks: start a second after ``now``.
    start = now.astimezone(tz).replace(microsecond=0) + timedelta(seconds=1)
    try:
        found = next(CronSim(expr, start, reverse=True))
    except StopIteration:
        raise InvalidSchedule(f"cron expression {expr!r} has no slot before {now}") from None
    # In the repeated hour of a fall-back night the reverse walk lands on the first pass
    # (02:10 CEST at 02:12 CET): step forward while the next slot is not after ``now``.
    # Compared as instants: aware datetimes in one zone compare by wall time.
    while (following := next_slot(expr, tz, found)).timestamp() <= now.timestamp():
        found = following
    return found


def slots(expr: str, tz: ZoneInfo, after: datetime, count: int) -> list[datetime]:
    """The next ``count`` slots after ``after`` (the admin shows five)."""
    found: list[datetime] = []
    for _ in range(count):
        after = next_slot(expr, tz, after)
        found.append(after)
    return found


def crons(value: object) -> tuple[Cron, ...]:
    """``@job(cron=...)``: a string, a ``Cron`` or a list of them, as ``Cron`` values."""
    if value is None:
        return ()
    items = list(value) if isinstance(value, list | tuple) else [value]
    result = []
    for item in items:
        if isinstance(item, str):
            result.append(Cron(item))
        elif isinstance(item, Cron):
            result.append(item)
        else:
            raise InvalidSchedule(
                f"@job cron must be a string, a Cron or a list of them, got {item!r}"
            )
    return tuple(result)
