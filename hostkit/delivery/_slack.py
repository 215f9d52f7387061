"""The Slack channel: ``chat.postMessage`` (``chat.postEphemeral``) with the bot token.

JSON ``{"channel", "text", "thread_ts"?, "metadata", "unfurl_links", "unfurl_media"}``
where the metadata event (``hostkit_delivery``) carries the intent id, so a
reader of the channel history can tell a retried post. An approval prompt adds Block Kit
blocks: the text as a section and two buttons (``hostkit_approve`` /
``hostkit_deny``) whose values are the commands ``approve CODE`` / ``deny
CODE`` the Slack transport turns back into an inbound command. The answer
to a press of one of them is ``chat.postEphemeral`` to the user who pressed
(``{"channel", "user", "text", "thread_ts"?}`` and the unfurl flags): only
they see it.

Slack answers errors with HTTP 200 and ``{"ok": false, "error": ...}``:
``ratelimited`` and Slack-side failures are transient, everything else
(``channel_not_found``, ``not_in_channel``, ``invalid_auth``, ...) is
permanent. HTTP 429 (``Retry-After``) and 5xx are transient.

Every text is posted as mrkdwn, so model text could otherwise write Slack
control sequences (``<!channel>``, ``<https://evil|Approve>``): ``&``, ``<``
and ``>`` are escaped the way Slack asks, in the message text and the prompt
section alike. A text is cut before it is escaped, to what fits once escaped,
so a cut never splits an entity. Unfurls are off: an unfurl makes Slack fetch a
URL of the text with no click, and model text can put data in its query.

Slack refuses a long text (``msg_too_long``) well below its documented 40,000
characters, so a text is kept within 4,000 (a routed answer comes in parts that
fit, ``split_parts``); a refusal as too long is told to the conversation
(``TOO_LONG_NOTICE``) before the intent is dead-lettered, never left silent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import httpx

from hostkit.delivery._channel import payload_text, permanent, reply_target, transient
from hostkit.delivery._http import SharedClient, check_channel, post, retry_after
from hostkit.errors import DeliveryRefused
from hostkit.types import APPROVAL_BLOCK, MAX_PART_UNITS, PRESS_ANSWER, chat_units, cut_to

__all__ = ["TOO_LONG_NOTICE", "SlackChannel"]

# Slack's advice for a message's text (it refuses far shorter texts than its 40,000);
# a section block holds at most 3,000 characters. Both count the escaped text.
MAX_TEXT = MAX_PART_UNITS
MAX_SECTION = 3_000
# What the conversation is told when Slack refused a message as too long anyway.
TOO_LONG_NOTICE = (
    "A reply here was too long for Slack to show, so it was not posted. "
    "Please ask for a shorter answer."
)
_TOO_LONG = "msg_too_long"
_NO_UNFURL = {"unfurl_links": False, "unfurl_media": False}
# chat.postMessage answers "rate_limited" for too many messages to one channel, besides
# the Web API's own "ratelimited".
_TRANSIENT_ERRORS = frozenset(
    {
        "ratelimited",
        "rate_limited",
        "internal_error",
        "fatal_error",
        "service_unavailable",
        "request_timeout",
    }
)
# A workspace id as the Slack adapter takes one (``field_id``): it ends up in a block id.
_TEAM = re.compile(r"[A-Za-z0-9_.@+-]{1,128}")
_ERROR_CODE = re.compile(r"^[a-z0-9_]{1,60}$")
# A refusal's reason in the opening of an answer that broke off (Slack writes it next).
_OPENING_ERROR = re.compile(rb'"error"\s*:\s*"([a-z0-9_]{1,60})"')


def escape(text: str) -> str:
    """Slack's mrkdwn escaping: no mention, link or command can be spelled in ``text``."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def fitted(text: str, limit: int) -> str:
    """``text`` escaped, within ``limit`` characters: the raw text is cut to what fits
    once escaped (``chat_units`` counts each ``&`` as its ``&amp;``), then escaped."""
    return escape(cut_to(text, limit, chat_units))


def approval_blocks(
    text: str, approval: Mapping[str, Any], *, team: str | None = None
) -> list[dict[str, Any]]:
    """A section with the (raw) prompt and an actions block with Approve / Deny buttons.

    The actions block is ``APPROVAL_BLOCK/<team>`` for the workspace of the
    conversation that asked (the first part of its key): a press is keyed by it,
    as the asking message was, whatever workspace Slack names in the press.
    """
    code = str(approval.get("code", ""))
    return [
        # verbatim: mrkdwn text objects otherwise parse a plain @channel or @here in the
        # call's arguments into a mention that notifies the whole channel.
        {
            "type": "section",
            "text": {"type": "mrkdwn", "text": fitted(text, MAX_SECTION), "verbatim": True},
        },
        {
            "type": "actions",
            "block_id": APPROVAL_BLOCK if team is None else f"{APPROVAL_BLOCK}/{team}",
            "elements": [
                {
                    "type": "button",
                    "action_id": "hostkit_approve",
                    "text": {"type": "plain_text", "text": "Approve"},
                    "style": "primary",
                    "value": f"approve {code}",
                },
                {
                    "type": "button",
                    "action_id": "hostkit_deny",
                    "text": {"type": "plain_text", "text": "Deny"},
                    "style": "danger",
                    "value": f"deny {code}",
                },
            ],
        },
    ]


def _asking_team(route: Mapping[str, Any]) -> str | None:
    """The workspace of the conversation a prompt asks in: its key's first part
    (``<team>:<channel>:<user>``), or None when the route has no such key."""
    conversation = route.get("conversation")
    if not isinstance(conversation, str):
        return None
    team = conversation.partition(":")[0]
    return team if _TEAM.fullmatch(team) else None


class SlackChannel:
    """Posts to ``<api_origin>/chat.postMessage``; the token is sent only as a Bearer header."""

    def __init__(
        self,
        api_origin: str,
        token: str,
        client: httpx.AsyncClient | SharedClient,
        *,
        timeout_s: float = 30.0,
    ) -> None:
        timeout_s = check_channel(api_origin, token, timeout_s)
        self.api_origin = api_origin.rstrip("/")
        self._token = token
        self._client = client
        self._timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"SlackChannel({self.api_origin!r})"

    async def send(
        self, route: Mapping[str, Any], payload: Mapping[str, Any], *, idempotency_key: str
    ) -> None:
        reply = reply_target(route)
        channel, thread = reply.get("channel"), reply.get("thread_ts")
        if not isinstance(channel, str) or not channel:
            raise permanent("bad_route", "the slack reply target has no channel")
        if thread is not None and (not isinstance(thread, str) or not thread):
            raise permanent("bad_route", "the slack thread_ts is not a timestamp string")
        text = payload_text(payload)
        body: dict[str, Any] = {"channel": channel, "text": fitted(text, MAX_TEXT), **_NO_UNFURL}
        if thread:
            body["thread_ts"] = thread
        if isinstance(payload.get(PRESS_ANSWER), Mapping):
            # To the presser alone; no route to them is a dead letter, never a channel post.
            user = reply.get("user")
            if not isinstance(user, str) or not user:
                raise permanent("bad_route", "the answer to a press names no slack user")
            await self._told_if_too_long("chat.postEphemeral", {**body, "user": user})
            return
        body["metadata"] = {
            "event_type": "hostkit_delivery",
            "event_payload": {"intent_id": idempotency_key},
        }
        approval = payload.get("approval")
        if isinstance(approval, Mapping):
            body["blocks"] = approval_blocks(text, approval, team=_asking_team(route))
        await self._told_if_too_long("chat.postMessage", body)

    async def _told_if_too_long(self, method: str, body: Mapping[str, Any]) -> None:
        """``method`` with ``body``; when Slack refuses it as too long, the same call with
        ``TOO_LONG_NOTICE`` instead, then the refusal (a dead letter an operator sees)."""
        try:
            await self._call(method, body)
        except DeliveryRefused as refused:
            if refused.failure.code != _TOO_LONG:
                raise
            notice = {k: v for k, v in body.items() if k != "blocks"}
            await self._call(method, {**notice, "text": TOO_LONG_NOTICE})
            raise permanent(
                _TOO_LONG, "slack refused the post as too long; the conversation was told"
            ) from None

    async def _call(self, method: str, body: Mapping[str, Any]) -> None:
        """One Web API call; returns when Slack accepted it, else ``DeliveryRefused``."""
        answer = await post(
            self._client,
            f"{self.api_origin}/{method}",
            content=json.dumps(body, separators=(",", ":")).encode(),
            headers={
                "Content-Type": "application/json; charset=utf-8",
                "Authorization": f"Bearer {self._token}",
            },
            timeout_s=self._timeout_s,
        )
        if answer.status == 429:
            raise transient(
                "ratelimited",
                "slack answered HTTP 429",
                retry_after_s=retry_after(answer.headers.get("retry-after")),
            )
        if answer.status >= 500 or answer.status == 408:
            raise transient(f"http_{answer.status}", f"slack answered HTTP {answer.status}")
        if answer.status != 200:
            raise permanent(f"http_{answer.status}", f"slack answered HTTP {answer.status}")
        accepted = answer.ok()
        if accepted is None:
            raise transient("bad_response", "slack's answer is not a Web API response")
        if accepted:
            return
        data = answer.json()
        error = data.get("error") if isinstance(data, dict) else None
        if answer.cut and data is None:
            found = _OPENING_ERROR.search(answer.body)
            if found is None:
                # Refused, but the reason broke off with the answer: it may be a "for now"
                # (ratelimited), so it is not dead-lettered on a guess.
                raise transient("slack_error", "slack refused the post; its reason was cut off")
            error = found.group(1).decode()
        code = error if isinstance(error, str) and _ERROR_CODE.fullmatch(error) else "slack_error"
        if code in _TRANSIENT_ERRORS:
            raise transient(
                code,
                "slack refused the post for now",
                retry_after_s=retry_after(answer.headers.get("retry-after")),
            )
        raise permanent(code, "slack refused the post")
