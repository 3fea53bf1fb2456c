"""The form of a model endpoint (Models page). It validates into `EndpointData`; the API key
field is write-only: left blank it keeps the stored key."""

from __future__ import annotations

import math
import re
from typing import Any

from django import forms

from inference.simulation import limits
from studio.forms.fields import check_plain_name
from studio.models import EndpointKind, EndpointRole, ModelEndpoint
from studio.services import endpoint_hosts
from studio.services.endpoints import OPENAI_ONLY_ROLES, EndpointData, env_key_refusal

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PRICE_MAX = 10_000.0  # USD per million tokens: above any provider's list price


class EndpointForm(forms.Form):
    name = forms.CharField(max_length=100)
    role = forms.ChoiceField(choices=EndpointRole.choices)
    kind = forms.ChoiceField(choices=EndpointKind.choices)
    base_url = forms.CharField(
        required=False,
        max_length=500,
        label="Base URL",
        help_text="OpenAI-compatible servers: e.g. http://127.0.0.1:8001/v1. Its host must be "
        "one the operator allows (STUDIO_ENDPOINT_ALLOWED_HOSTS).",
    )
    model = forms.CharField(
        required=False,
        max_length=300,
        help_text="The served model name, or for in-process models a local path or hub id.",
    )
    api_key = forms.CharField(
        required=False,
        max_length=2000,
        label="API key",
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Stored encrypted and never shown again. Blank keeps the stored one.",
    )
    clear_api_key = forms.BooleanField(required=False, label="Remove the stored API key")
    api_key_env = forms.CharField(
        required=False,
        max_length=100,
        label="or: API key from the environment variable",
        help_text="Its name, e.g. WORLD_MODEL_API_KEY; the workers read it when they run. "
        "Each variable may only be sent to the base URL the operator bound it to.",
    )
    temperature = forms.FloatField(required=False, label="Default temperature")
    top_p = forms.FloatField(required=False, label="Default top_p")
    max_tokens = forms.IntegerField(required=False, label="Default max_tokens")
    context_length = forms.IntegerField(
        required=False, min_value=1, max_value=100_000_000, label="Context length"
    )
    supports_n = forms.BooleanField(
        required=False,
        initial=True,
        label="Samples N choices in one request (n)",
        help_text="Off: the studio sends one request per future.",
    )
    price_in_per_mtok = forms.FloatField(
        required=False,
        label="Price of input tokens (USD per 1M)",
        help_text="What the provider charges; campaigns show their cost with it. Blank: "
        "no price set (no cost is shown, rather than a cost of 0).",
    )
    price_out_per_mtok = forms.FloatField(
        required=False, label="Price of output tokens (USD per 1M)"
    )

    def __init__(self, *args, project, endpoint: ModelEndpoint | None = None, **kwargs):
        if endpoint is not None and "initial" not in kwargs:
            kwargs["initial"] = {
                f: getattr(endpoint, f)
                for f in (
                    "name",
                    "role",
                    "kind",
                    "base_url",
                    "model",
                    "api_key_env",
                    "temperature",
                    "top_p",
                    "max_tokens",
                    "context_length",
                    "supports_n",
                    "price_in_per_mtok",
                    "price_out_per_mtok",
                )
            }
        super().__init__(*args, **kwargs)
        self.project = project
        self.endpoint = endpoint
        if endpoint is not None and endpoint.api_key_encrypted:
            self.fields[
                "api_key"
            ].help_text = (
                "A key is stored (encrypted; it is never shown). Type a new one to replace it."
            )

    def clean_name(self) -> str:
        name = self.cleaned_data["name"].strip()
        if not name:
            raise forms.ValidationError("An endpoint needs a name.")
        name = check_plain_name(name, "the endpoint's name")
        taken = self.project.endpoints.filter(name=name)
        if self.endpoint is not None:
            taken = taken.exclude(pk=self.endpoint.pk)
        if taken.exists():
            raise forms.ValidationError(f"This project already has an endpoint named {name!r}.")
        return name

    def clean_base_url(self) -> str:
        return self.cleaned_data["base_url"].strip().rstrip("/")

    def clean_api_key_env(self) -> str:
        name = self.cleaned_data["api_key_env"].strip()
        if name and not ENV_NAME.match(name):
            raise forms.ValidationError(
                f"{name!r} is not an environment variable name (letters, digits, _)."
            )
        return name

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        role, kind = data.get("role"), data.get("kind")
        if role in OPENAI_ONLY_ROLES and kind and kind != "openai":
            api = "embeddings" if role == EndpointRole.EMBEDDING else "chat"
            self.add_error(
                "kind",
                f"{EndpointRole(role).label}s are OpenAI-compatible {api} servers; "
                f"{EndpointKind(kind).label.split(' (')[0]} can only be a world model.",
            )
        if kind in limits.BACKENDS_NEEDING_BASE_URL:
            url = data.get("base_url", "")
            if not url:
                self.add_error("base_url", "An OpenAI-compatible server needs its base URL.")
            elif not url.startswith(("http://", "https://")):
                self.add_error(
                    "base_url", f"The base URL must start with http:// or https:// (got {url!r})."
                )
            elif refusal := endpoint_hosts.refusal(url):
                self.add_error("base_url", refusal + ".")
        if kind in limits.BACKENDS_NEEDING_MODEL and not (data.get("model") or "").strip():
            self.add_error("model", "Name the model: the served model name, or a path or hub id.")
        if data.get("api_key") and data.get("api_key_env"):
            self.add_error("api_key_env", "Give the key or the name of its variable, not both.")
        elif kind == "openai" and data.get("api_key_env") and "base_url" not in self.errors:
            refusal = env_key_refusal(data["api_key_env"], data.get("base_url", ""))
            if refusal:
                self.add_error("api_key_env", refusal[0].upper() + refusal[1:] + ".")
        self._check_range(data, "temperature", 0.0, limits.TEMPERATURE_MAX)
        self._check_range(data, "top_p", 0.0, 1.0, open_low=True)
        self._check_range(data, "max_tokens", 1, limits.MAX_TOKENS)
        for name in ("price_in_per_mtok", "price_out_per_mtok"):
            value = data.get(name)
            if value is None:
                continue
            if not math.isfinite(value) or not 0 <= value <= PRICE_MAX:
                self.add_error(
                    name,
                    f"{self.fields[name].label}: a price is from 0 to {PRICE_MAX:,.0f} dollars "
                    f"per million tokens (got {value:g}).",
                )
        return data

    def _check_range(self, data, name, low, high, *, open_low=False) -> None:
        value = data.get(name)
        if value is None:
            return
        if (value <= low if open_low else value < low) or value > high:
            bracket = "(" if open_low else "["
            self.add_error(name, f"{name} must be in {bracket}{low:g}, {high:g}] (got {value:g}).")

    def endpoint_data(self) -> EndpointData:
        d = self.cleaned_data
        kind = d["kind"]
        api_key: str | None = d.get("api_key") or None
        if d.get("clear_api_key") and api_key is None:  # a key typed as well wins
            api_key = ""
        return EndpointData(
            name=d["name"],
            role=d["role"],
            kind=kind,
            base_url=d["base_url"] if kind in limits.BACKENDS_NEEDING_BASE_URL else "",
            model=(d.get("model") or "").strip() if kind != "retrieval" else "",
            api_key=api_key if kind == "openai" else "",
            api_key_env=d.get("api_key_env", "") if kind == "openai" else "",
            temperature=d.get("temperature"),
            top_p=d.get("top_p"),
            max_tokens=d.get("max_tokens"),
            context_length=d.get("context_length"),
            supports_n=bool(d.get("supports_n")),
            price_in_per_mtok=d.get("price_in_per_mtok"),
            price_out_per_mtok=d.get("price_out_per_mtok"),
        )
