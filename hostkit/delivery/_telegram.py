"""The Telegram channel: the Bot API's ``sendMessage`` and ``answerCallbackQuery``.

JSON ``{"chat_id", "text", "link_preview_options"}``; an approval prompt adds an inline keyboard
with Approve / Deny buttons whose ``callback_data`` are the commands
``approve CODE`` / ``deny CODE``. The answer to a press of one of those
buttons is ``answerCallbackQuery`` instead: a notification (an alert for a
refusal) only the person who pressed sees, which also ends the progress
indicator Telegram shows on the button until the bot answers. The bot token
is part of the URL path (``/bot<token>/sendMessage``), so no URL or httpx
message ever reaches a log, an error or a row. 429 (``parameters.retry_after``)
and 5xx are transient; 400, 401, 403, 404 (chat not found, bot blocked, bad
token, a callback query too old to answer) are permanent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import httpx

from hostkit.channels import hide_url_tokens
from hostkit.delivery._channel import payload_text, permanent, reply_target, transient
from hostkit.delivery._http import SharedClient, check_channel, post, retry_after
from hostkit.errors import scrub_secret
from hostkit.types import PRESS_ANSWER, cut_to, utf16_units

__all__ = ["TelegramChannel"]

# UTF-16 code units (an emoji is two).
MAX_TEXT = 4_096
# answerCallbackQuery shows 0-200 characters.
MAX_NOTIFICATION = 200
_NO_PREVIEW = {"is_disabled": True}
_MAX_QUERY_ID = 64
_CHAT_NAME = re.compile(r"^@[A-Za-z0-9_]{5,64}$")


def _chat_id(value: object) -> int | str | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and (
        _CHAT_NAME.fullmatch(value) or re.fullmatch(r"-?\d{1,20}", value)
    ):
        return value
    return None


def _press_answer(
    route: Mapping[str, Any], payload: Mapping[str, Any], press: Mapping[str, Any]
) -> dict[str, Any]:
    """``answerCallbackQuery``'s body: to the query the route's reply target names, never
    the chat (no query id is ``bad_route``, not a message to everyone)."""
    query_id = reply_target(route).get("callback_query_id")
    if not isinstance(query_id, str) or not 0 < len(query_id) <= _MAX_QUERY_ID:
        raise permanent("bad_route", "the answer to a press has no callback_query_id")
    return {
        "callback_query_id": query_id,
        "text": cut_to(payload_text(payload), MAX_NOTIFICATION, utf16_units, "…"),
        "show_alert": press.get("alert") is True,
    }


def approval_keyboard(approval: Mapping[str, Any]) -> dict[str, Any]:
    code = str(approval.get("code", ""))
    return {
        "inline_keyboard": [
            [
                {"text": "Approve", "callback_data": f"approve {code}"},
                {"text": "Deny", "callback_data": f"deny {code}"},
            ]
        ]
    }


class TelegramChannel:
    """Sends through ``<api_origin>/bot<token>/sendMessage``."""

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
        # httpx logs every request URL at INFO, and this one carries the token.
        hide_url_tokens()
        self._client = client
        self._timeout_s = timeout_s

    def __repr__(self) -> str:
        return f"TelegramChannel({self.api_origin!r})"

    async def send(
        self, route: Mapping[str, Any], payload: Mapping[str, Any], *, idempotency_key: str
    ) -> None:
        press = payload.get(PRESS_ANSWER)
        if isinstance(press, Mapping):
            await self._call("answerCallbackQuery", _press_answer(route, payload, press))
            return
        chat_id = _chat_id(reply_target(route).get("chat_id"))
        if chat_id is None:
            raise permanent("bad_route", "the telegram reply target has no chat_id")
        body: dict[str, Any] = {
            "chat_id": chat_id,
            "text": cut_to(payload_text(payload), MAX_TEXT, utf16_units),
            "link_preview_options": _NO_PREVIEW,
        }
        topic = reply_target(route).get("message_thread_id")
        if isinstance(topic, int) and not isinstance(topic, bool) and 0 < topic < 2**31:
            body["message_thread_id"] = topic  # the forum topic the question came from
        approval = payload.get("approval")
        if isinstance(approval, Mapping):
            body["reply_markup"] = approval_keyboard(approval)
        await self._call("sendMessage", body)

    async def _call(self, method: str, body: Mapping[str, Any]) -> None:
        """One Bot API call; returns when Telegram accepted it, else ``DeliveryRefused``."""
        answer = await post(
            self._client,
            f"{self.api_origin}/bot{self._token}/{method}",
            content=json.dumps(body, separators=(",", ":")).encode(),
            headers={"Content-Type": "application/json"},
            timeout_s=self._timeout_s,
        )
        data = answer.json()
        data = data if isinstance(data, dict) else {}
        if answer.status == 200 and answer.ok() is True:
            return
        code = f"telegram_{answer.status}"
        if answer.status == 429:
            parameters = data.get("parameters")
            wait = parameters.get("retry_after") if isinstance(parameters, dict) else None
            raise transient(
                code,
                "telegram asked to slow down",
                retry_after_s=retry_after(
                    wait if wait is not None else answer.headers.get("retry-after")
                ),
            )
        if answer.status >= 500 or answer.status in (408, 200):
            raise transient(code, f"telegram answered HTTP {answer.status}")
        description = data.get("description")
        detail = description if isinstance(description, str) else f"HTTP {answer.status}"
        raise permanent(code, scrub_secret(detail, self._token))
