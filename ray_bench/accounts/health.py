"""The account health state machine.

States: ``healthy``, ``degraded`` (probation), ``cooling`` (until a time), ``expired``
(credentials need a refresh), ``held`` (by an operator), ``disabled`` (after N auth failures).

Transition table (``N`` = ``max_auth_failures``; ``tick`` is time passing, applied lazily by
every call that takes ``now``):

==========  ===============================  ==========  ==========================================
from        event                            to          notes
==========  ===============================  ==========  ==========================================
healthy     success                          healthy     auth-failure count reset
healthy     rate_limited(ra)                 cooling     until now + cooldown(ra, episode 1)
healthy     auth_failed (< N so far)         degraded
healthy     auth_failed (N-th)               disabled
healthy     auth_failed(expired)             expired
healthy     server_error (< M in a row)      healthy     M = ``max_server_errors``
healthy     server_error (M-th in a row)     cooling     episode + 1, the rate-limit backoff
degraded    success of the probe (or later)  healthy     episode and auth counts reset
degraded    success begun before the probe   degraded    says nothing about the account now
degraded    tick: probe window passed        healthy     one probe start, no signal within window
degraded    rate_limited(ra)                 cooling     episode + 1: cooldown doubles
degraded    auth_failed (< N / N-th/expired) degraded / disabled / expired
degraded    server_error of the probe        cooling     episode + 1: cooldown doubles
cooling     tick: now >= until               degraded    one probe start per probe window
cooling     rate_limited(ra)                 cooling     until = max(until, now + cooldown); same
                                                         episode if the attempt began before it
healthy,    rate_limited from an attempt     unchanged   stale: it began before the last episode
degraded    begun before the last episode
cooling     auth_failed (< N / N-th/expired) cooling / disabled / expired
cooling     server_error                     cooling     begun before the episode: nothing new
cooling     success                          cooling     a cell from before the episode finished
expired     refresh                          healthy     the operator logged in again
disabled    enable                           healthy     operator action, counts reset
any         hold                             held
held        release                          healthy     or cooling if its cooldown has not ended
expired,    success / rate_limited /         unchanged   late results of earlier attempts
disabled,   auth_failed
held
==========  ===============================  ==========  ==========================================

``cooldown(ra, k) = min(max_cooldown_s, max(ra or default_retry_after_s,
base_cooldown_s * 2**(k-1)))`` honours Retry-After and backs off exponentially while an
episode continues (a probe from probation gets rate-limited again).

Admission by state: ``healthy`` admits up to the limit; ``degraded`` admits one probe
start per ``probe_window_s``; every other state admits nothing.

Account probes (an account's ``probe_command``, run before the fan-out and every
``PROBE_EVERY_SEC`` for a held or cooling account): :func:`probe_effect` maps the probe's
classified verdict to what it does, :meth:`AccountHealth.on_probe` applies it. ``auth``
disables, ``expired`` expires, ``provider``/``capacity`` cool (the rate-limit backoff); a
passing probe ends a cooldown early, but never one a provider's Retry-After (or reset time)
set, and never lifts a hold, a disable or an expiry (those are the operator's); anything else
(the command cannot run, a timeout) says nothing about the account.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from ray_bench.models.accounts import BASE_COOLDOWN_S, MAX_COOLDOWN_S

#: How often a held or cooling account's probe runs while its run waits on it: a probe costs a
#: request, and cooldowns start at 60 s (``HealthPolicy.base_cooldown_s``, an account's
#: ``cooldown_s``).
PROBE_EVERY_SEC = 120.0

ProbeEffect = Literal["clear", "cool", "disable", "expire", "none"]


def probe_effect(verdict: str) -> ProbeEffect:
    """What a probe's verdict (``ray_bench.accounts.probe.ProbeResult.verdict``) does."""
    effects: dict[str, ProbeEffect] = {"ok": "clear", "auth": "disable", "expired": "expire",
                                       "provider": "cool", "capacity": "cool"}
    return effects.get(verdict, "none")


#: The account store's ``operator_events`` kind of a probe result: ``probe:<effect>``. The
#: driver writes it, the account's actor (health's one writer) applies it, as an ``enable``.
PROBE_EVENT_PREFIX = "probe:"
_EFFECTS: tuple[ProbeEffect, ...] = ("clear", "cool", "disable", "expire", "none")


def probe_event_kind(effect: ProbeEffect) -> str:
    return PROBE_EVENT_PREFIX + effect


def probe_effect_of(kind: str) -> ProbeEffect | None:
    tail = kind.removeprefix(PROBE_EVENT_PREFIX)
    return next((e for e in _EFFECTS if e == tail), None) if kind.startswith(PROBE_EVENT_PREFIX) else None


def probe_due(state: str, last_probe_at: float | None, now: float, every_s: float = PROBE_EVERY_SEC) -> bool:
    """Whether an account in ``state`` is due a scheduled probe (held or cooling only)."""
    return state in ("held", "cooling") and (last_probe_at is None or now - last_probe_at >= every_s)


class HealthState(StrEnum):
    HEALTHY = "healthy"
    DEGRADED = "degraded"
    COOLING = "cooling"
    EXPIRED = "expired"
    HELD = "held"
    DISABLED = "disabled"


@dataclass(frozen=True, slots=True)
class HealthPolicy:
    """Tunables of the health machine (all seconds). ``base_cooldown_s`` is an account's
    ``cooldown_s`` from accounts.yaml when it sets one (:func:`~ray_bench.accounts.limits.health_policy`)."""

    max_auth_failures: int = 1
    base_cooldown_s: float = BASE_COOLDOWN_S
    max_cooldown_s: float = MAX_COOLDOWN_S
    default_retry_after_s: float = 60.0
    probe_window_s: float = 60.0
    max_server_errors: int = 3
    """Consecutive 5xx answers after which an account cools like a rate-limited one: one 500
    is the provider's bad moment, three in a row a broken account (issue 25: one cell took six
    attempts on an account answering 500 while the healthy account was busy)."""

    def __post_init__(self) -> None:
        if self.max_auth_failures < 1:
            raise ValueError("max_auth_failures must be at least 1")
        if self.max_server_errors < 1:
            raise ValueError("max_server_errors must be at least 1")
        if not 0 < self.base_cooldown_s <= self.max_cooldown_s:
            raise ValueError("need 0 < base_cooldown_s <= max_cooldown_s")


_INERT = (HealthState.EXPIRED, HealthState.DISABLED, HealthState.HELD)

#: The classes :class:`AccountHealth` writes at the head of ``last_error`` when it cools.
_COOLING_CLASS = re.compile(r"(rate_limited|server_error)\b")


def reason_class(state: str, last_error: str) -> str:
    """Why an account is out of (or short of) the pool, as a class: ``auth`` (disabled by auth
    failures, or an expired login), ``rate_limited`` / ``server_error`` (cooling, as
    :meth:`AccountHealth.on_rate_limited` / :meth:`~AccountHealth.on_server_error` wrote it),
    ``operator`` (held); ``""`` for an account in the pool with nothing to say."""
    found = _COOLING_CLASS.match(last_error)
    if found:
        return found.group(1)
    return {"disabled": "auth", "expired": "auth", "held": "operator"}.get(state, "other" if last_error else "")


class AccountHealth:
    """One account's health, on an injected clock."""

    def __init__(self, policy: HealthPolicy | None = None) -> None:
        self.policy = policy or HealthPolicy()
        self.state = HealthState.HEALTHY
        self.cooling_until = -math.inf
        self.episodes = 0
        """Consecutive rate-limit episodes since the account was last healthy."""
        self.auth_failures = 0
        self.server_errors = 0
        """Consecutive server errors (5xx) since the last success or cooldown."""
        self.last_error = ""
        self._episode_started_at = -math.inf
        self._probe_at: float | None = None
        #: Until when the provider itself said to wait (Retry-After, a reset time): a passing
        #: probe does not end a cooldown before it.
        self._provider_until = -math.inf

    # -- time -------------------------------------------------------------------------
    def tick(self, now: float) -> HealthState:
        """Apply the time-driven transitions; return the state at ``now``."""
        if self.state is HealthState.COOLING and now >= self.cooling_until:
            self.state = HealthState.DEGRADED
            self._probe_at = None
        if (self.state is HealthState.DEGRADED and self._probe_at is not None
                and now >= self._probe_at + self.policy.probe_window_s):
            self._to_healthy()
        return self.state

    def admits(self, now: float) -> bool:
        """Whether the state allows a start now (limits are checked elsewhere)."""
        state = self.tick(now)
        if state is HealthState.HEALTHY:
            return True
        return state is HealthState.DEGRADED and self._probe_at is None

    def blocked_until(self, now: float) -> float | None:
        """When the state may next admit: a time, or ``None`` when only an operator can help."""
        state = self.tick(now)
        if state is HealthState.HEALTHY:
            return now
        if state is HealthState.DEGRADED:
            return now if self._probe_at is None else self._probe_at + self.policy.probe_window_s
        if state is HealthState.COOLING:
            return self.cooling_until
        return None

    def cooldown_left(self, now: float) -> float:
        self.tick(now)
        return max(0.0, self.cooling_until - now) if self.state is HealthState.COOLING else 0.0

    # -- attempt events ---------------------------------------------------------------
    def on_start(self, now: float) -> None:
        if self.tick(now) is HealthState.DEGRADED and self._probe_at is None:
            self._probe_at = now

    def on_success(self, now: float, started_at: float) -> None:
        state = self.tick(now)
        if state is HealthState.HEALTHY:
            self.auth_failures = 0
            self.server_errors = 0
        elif (state is HealthState.DEGRADED and self._probe_at is not None
              and started_at >= self._probe_at):
            self._to_healthy()

    def on_rate_limited(self, now: float, started_at: float, retry_after: float | None, detail: str = "") -> None:
        """A 429 (or a subscription's usage limit): cool by ``retry_after`` (the provider's wait;
        a usage limit's, to its reset), doubling per episode; ``detail``, what the attempt said
        (its limit and reset as the CLI printed them), is kept in :attr:`last_error`."""
        state = self.tick(now)
        if state in _INERT:
            return
        p = self.policy
        if started_at < self._episode_started_at:
            # A late signal from an attempt already in flight when the episode began: it
            # says nothing new. While cooling it may extend the wait; otherwise ignore it.
            if state is not HealthState.COOLING:
                return
            k = max(1, self.episodes)
        else:
            self.episodes += 1
            k = self.episodes
            self._episode_started_at = now
        ra = retry_after if retry_after is not None else p.default_retry_after_s
        if retry_after is not None:
            self._provider_until = max(self._provider_until, now + retry_after)
        self._cool(now, k, ra)
        self.last_error = f"rate_limited (retry_after={ra:g}s)" + (f": {detail[:200]}" if detail else "")

    def on_server_error(self, now: float, started_at: float, detail: str = "") -> None:
        """A 5xx answer. ``max_server_errors`` in a row cool the account with the rate-limit
        backoff (each further episode doubles the wait); a degraded account's failed probe
        cools it again at once. Attempts begun before a cooldown say nothing new."""
        state = self.tick(now)
        if state in _INERT:
            return
        self.last_error = f"server_error ({detail})" if detail else "server_error"
        if state is HealthState.COOLING or started_at < self._episode_started_at:
            return
        if state is HealthState.DEGRADED and (self._probe_at is None or started_at < self._probe_at):
            return
        self.server_errors += 1
        if state is HealthState.HEALTHY and self.server_errors < self.policy.max_server_errors:
            return
        streak = self.server_errors
        self.episodes += 1
        self._episode_started_at = now
        self._cool(now, self.episodes, self.policy.default_retry_after_s)
        self.last_error = f"server_error x{streak}, cooling" + (f" ({detail})" if detail else "")

    def _cool(self, now: float, k: int, floor_s: float) -> None:
        """Cool for the ``k``-th episode's backoff, never less than ``floor_s`` (Retry-After)."""
        p = self.policy
        cooldown = min(p.max_cooldown_s, max(floor_s, p.base_cooldown_s * 2 ** (k - 1)))
        # Retry-After is a floor even above our cap: the provider said so.
        cooldown = max(cooldown, floor_s)
        self.cooling_until = max(self.cooling_until, now + cooldown)
        self.state = HealthState.COOLING
        self._probe_at = None
        self.server_errors = 0

    def on_auth_failed(self, now: float, *, expired: bool = False, detail: str = "") -> None:
        state = self.tick(now)
        if state in _INERT:
            return
        self.last_error = detail or ("credentials expired" if expired else "auth failed")
        if expired:
            self.state = HealthState.EXPIRED
            return
        self.auth_failures += 1
        if self.auth_failures >= self.policy.max_auth_failures:
            self.state = HealthState.DISABLED
        elif state is not HealthState.COOLING:
            self.state = HealthState.DEGRADED
            self._probe_at = None

    def restore(self, state: str, cooling_until: float, episodes: int, auth_failures: int,
                last_error: str) -> None:
        """Take up the state an earlier holder of this account saved (a held account is the
        the admission actor's business and comes back as healthy)."""
        self.state = HealthState(state) if state != HealthState.HELD else HealthState.HEALTHY
        self.cooling_until, self.episodes, self.auth_failures = cooling_until, episodes, auth_failures
        self.last_error = last_error
        self._probe_at = None
        # Who set a saved cooldown is not saved: it counts as the provider's (never cut short).
        self._provider_until = cooling_until

    def adopt(self, state: str, cooling_until: float, last_error: str, now: float, *,
              inert_too: bool = True) -> bool:
        """Take up what another keeper of this account learned (another run's actor on the same
        state root: the same credential, the same provider limits), where it is stricter than
        this one's: a cooldown that ends later, or a disabled or expired login (only when
        ``inert_too``: its writer had applied every operator event this one has). Never
        loosens; a held account is the admission actor's business. True if the state changed."""
        if self.state in _INERT:
            return False
        theirs = HealthState(state)
        if theirs in (HealthState.DISABLED, HealthState.EXPIRED) and inert_too:
            self.state, self.last_error = theirs, last_error
            return True
        if theirs is HealthState.COOLING and cooling_until > max(now, self.cooling_until):
            self.state, self.cooling_until, self.last_error = HealthState.COOLING, cooling_until, last_error
            self._provider_until = max(self._provider_until, cooling_until)  # theirs may be the provider's
            self._probe_at = None
            return True
        return False

    def on_probe(self, now: float, effect: ProbeEffect, retry_after: float | None = None,
                 detail: str = "") -> bool:
        """Apply an account probe's result (:func:`probe_effect`); True if the state changed."""
        before = (self.tick(now), self.cooling_until)
        if effect == "clear":
            if self.state is HealthState.COOLING and now >= self._provider_until:
                self.cooling_until = now
                self._to_healthy()
                self.last_error = "cooldown ended early: the probe passed"
        elif effect == "cool":
            self.on_rate_limited(now, now, retry_after, detail)
        elif effect == "disable" and self.state not in _INERT:
            self.auth_failures = max(self.auth_failures, self.policy.max_auth_failures - 1)
            self.on_auth_failed(now, detail=detail or "the account probe failed with an auth error")
        elif effect == "expire":
            self.on_auth_failed(now, expired=True, detail=detail)
        return (self.state, self.cooling_until) != before

    # -- operator events --------------------------------------------------------------
    def hold(self) -> None:
        self.state = HealthState.HELD

    def release(self, now: float) -> None:
        if self.state is not HealthState.HELD:
            return
        if now < self.cooling_until:
            self.state = HealthState.COOLING
        else:
            self._to_healthy()

    def refresh(self) -> None:
        """Credentials were renewed (``expired`` -> ``healthy``)."""
        if self.state is HealthState.EXPIRED:
            self._to_healthy()

    def enable(self) -> None:
        """An operator re-enables a disabled account."""
        if self.state is HealthState.DISABLED:
            self._to_healthy()

    def _to_healthy(self) -> None:
        self.state = HealthState.HEALTHY
        self.episodes = 0
        self.auth_failures = 0
        self.server_errors = 0
        self._probe_at = None
