"""Demo worlds with screens: Android element lists, web pages and trees, desktop windows."""

from __future__ import annotations

import json

from studio.demo_data.system_prompts import SYSTEM
from studio.demo_data.worlds_text import META

# ------------------------------------------------------------------------------ Android


def el(cls: str, text: str = "", desc: str = "", box=(0, 0, 0, 0), rid: str = "", hint="", **flags):
    """One AndroidWorld-style UI element; flags become `is_<flag>` fields."""
    x0, y0, x1, y1 = box
    element = {
        "text": text or None,
        "content_description": desc or None,
        "hint_text": hint or None,
        "class_name": f"android.widget.{cls}" if "." not in cls else cls,
        "bbox_pixels": {"x_min": x0, "y_min": y0, "x_max": x1, "y_max": y1},
        "is_clickable": flags.pop("clickable", False),
        "is_enabled": flags.pop("enabled", True),
    }
    if rid:
        element["resource_name"] = rid
    element.update({f"is_{k}": v for k, v in flags.items()})
    return element


def screen(package: str, activity: str, elements: list[dict]) -> str:
    return json.dumps(
        {"package": package, "activity": activity, "ui_elements": elements},
        ensure_ascii=False,
    )


def act(action_type: str, **kw) -> str:
    return json.dumps({"action_type": action_type, **kw}, ensure_ascii=False)


CLOCK = "com.google.android.deskclock"
CLOCK_NAV = [
    el("TextView", "Alarm", box=(0, 2220, 216, 2340), clickable=True, selected=True),
    el("TextView", "Clock", box=(216, 2220, 432, 2340), clickable=True),
    el("TextView", "Timer", box=(432, 2220, 648, 2340), clickable=True),
    el("TextView", "Stopwatch", box=(648, 2220, 864, 2340), clickable=True),
    el("TextView", "Bedtime", box=(864, 2220, 1080, 2340), clickable=True),
]
OLD_ALARMS = [
    el("TextView", "7:00 AM", box=(63, 0, 520, 0), rid="digital_clock", clickable=True),
    el("TextView", "Mon, Tue, Wed, Thu, Fri", box=(63, 0, 700, 0), rid="days_of_week"),
    el(
        "Switch",
        desc="7:00 AM alarm",
        box=(880, 0, 1017, 0),
        rid="onoff",
        clickable=True,
        checked=True,
    ),
    el("TextView", "9:30 AM", box=(63, 0, 520, 0), rid="digital_clock", clickable=True),
    el("TextView", "Sat, Sun", box=(63, 0, 400, 0), rid="days_of_week"),
    el(
        "Switch",
        desc="9:30 AM alarm",
        box=(880, 0, 1017, 0),
        rid="onoff",
        clickable=True,
        checked=False,
    ),
]


def _stack(elements: list[dict], top: int, step: int) -> list[dict]:
    """Give list rows increasing y positions (three elements per alarm card)."""
    for i, element in enumerate(elements):
        y = top + (i // 3) * step + (i % 3 == 1) * 90
        box = element["bbox_pixels"]
        box["y_min"], box["y_max"] = y, y + (80 if i % 3 != 1 else 60)
    return elements


def alarm_list(expanded: list[dict] | None = None) -> list[dict]:
    top = [el("ImageButton", desc="More options", box=(960, 150, 1068, 258), clickable=True)]
    fab = [
        el("ImageButton", desc="Add alarm", box=(456, 2010, 624, 2178), rid="fab", clickable=True)
    ]
    cards = expanded or []
    old = _stack(
        [dict(e, bbox_pixels=dict(e["bbox_pixels"])) for e in OLD_ALARMS],
        1180 if cards else 330,
        300,
    )
    return top + cards + old + fab + CLOCK_NAV


def new_alarm_card(label: str) -> list[dict]:
    days = [
        el(
            "ToggleButton",
            d,
            desc=name,
            box=(63 + 130 * i, 560, 173 + 130 * i, 670),
            clickable=True,
            checked=False,
        )
        for i, (d, name) in enumerate(
            zip(
                "SMTWTFS",
                ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"],
                strict=True,
            )
        )
    ]
    return [
        el("TextView", "6:30 AM", box=(63, 330, 520, 450), rid="digital_clock", clickable=True),
        el("TextView", "Tomorrow", box=(63, 460, 400, 520), rid="upcoming_instance_label"),
        el(
            "Switch",
            desc="6:30 AM alarm",
            box=(880, 350, 1017, 430),
            rid="onoff",
            clickable=True,
            checked=True,
        ),
        *days,
        el(
            "TextView",
            label or "Add label",
            desc="Label" if label else "",
            box=(63, 700, 700, 790),
            rid="edit_label",
            clickable=True,
        ),
        el(
            "TextView",
            "Default (Cesium)",
            desc="Ringtone",
            box=(63, 800, 700, 890),
            rid="choose_ringtone",
            clickable=True,
        ),
        el(
            "CheckBox",
            "Vibrate",
            box=(63, 900, 700, 990),
            rid="vibrate_onoff",
            clickable=True,
            checked=True,
        ),
        el("TextView", "Delete", box=(63, 1000, 300, 1090), rid="delete", clickable=True),
    ]


def time_dialog(text_mode: bool, hour: str, minute: str, focus: str = "hour") -> list[dict]:
    if not text_mode:
        return [
            el("TextView", "Select time", box=(120, 700, 600, 780)),
            el(
                "TextView",
                hour,
                desc=f"{hour} o'clock",
                box=(180, 820, 420, 1000),
                clickable=True,
                selected=True,
            ),
            el("TextView", ":", box=(420, 820, 470, 1000)),
            el(
                "TextView",
                minute,
                desc=f"{minute} minutes",
                box=(470, 820, 710, 1000),
                clickable=True,
            ),
            el("TextView", "AM", box=(760, 820, 900, 905), clickable=True, checked=True),
            el("TextView", "PM", box=(760, 915, 900, 1000), clickable=True),
            el(
                "android.view.View",
                desc="Clock face, hours",
                box=(200, 1060, 880, 1740),
                clickable=True,
            ),
            el(
                "ImageButton",
                desc="Switch to text input mode for the time input",
                box=(120, 1790, 230, 1900),
                clickable=True,
            ),
            el("Button", "Cancel", box=(600, 1790, 780, 1900), clickable=True),
            el("Button", "OK", box=(800, 1790, 960, 1900), clickable=True),
        ]
    return [
        el("TextView", "Enter time", box=(120, 880, 600, 960)),
        el(
            "EditText",
            hour,
            box=(180, 1000, 420, 1180),
            rid="input_hour",
            clickable=True,
            editable=True,
            focused=focus == "hour",
        ),
        el("TextView", ":", box=(420, 1000, 470, 1180)),
        el(
            "EditText",
            minute,
            box=(470, 1000, 710, 1180),
            rid="input_minute",
            clickable=True,
            editable=True,
            focused=focus == "minute",
        ),
        el("TextView", "AM", box=(760, 1000, 900, 1085), clickable=True, checked=True),
        el("TextView", "PM", box=(760, 1095, 900, 1180), clickable=True),
        el(
            "ImageButton",
            desc="Switch to clock mode for the time input",
            box=(120, 1250, 230, 1360),
            clickable=True,
        ),
        el("Button", "Cancel", box=(600, 1250, 780, 1360), clickable=True),
        el("Button", "OK", box=(800, 1250, 960, 1360), clickable=True),
    ]


def label_dialog(text: str) -> list[dict]:
    return [
        el("TextView", "Label", box=(120, 900, 600, 980)),
        el(
            "EditText",
            text,
            box=(120, 1010, 960, 1130),
            rid="label_input",
            clickable=True,
            editable=True,
            focused=True,
            hint="" if text else "Label",
        ),
        el("Button", "Cancel", box=(600, 1180, 780, 1290), clickable=True),
        el("Button", "OK", box=(800, 1180, 960, 1290), clickable=True),
    ]


ACT = ".DeskClock"
ANDROID_CLOCK = {
    "title": "Set a 6:30 AM alarm labelled Gym",
    "domain": "android",
    "task_instruction": 'Set an alarm for 6:30 AM tomorrow and label it "Gym".',
    "system_prompt": SYSTEM["android"],
    "tools": [],
    "tags": ["demo", "android", "clock"],
    "metadata": {**META, "device": "Pixel 8 emulator, Android 15", "outcome": "success"},
    "steps": [
        {
            "state": "Home screen, unlocked.",
            "action": act("open_app", app_name="Clock"),
            "observation": screen(CLOCK, ACT, alarm_list()),
        },
        {
            "thinking": "Tap the + button to add an alarm.",
            "action": act("click", index=7),
            "observation": screen(CLOCK, ACT, time_dialog(False, "10", "48")),
        },
        {
            "thinking": "Typing is more reliable than dragging on the clock face.",
            "action": act("click", index=7),
            "observation": screen(CLOCK, ACT, time_dialog(True, "10", "48")),
        },
        {
            "action": act("input_text", index=1, text="6"),
            "observation": screen(CLOCK, ACT, time_dialog(True, "6", "48")),
        },
        {
            "action": act("input_text", index=3, text="30"),
            "observation": screen(CLOCK, ACT, time_dialog(True, "6", "30", focus="minute")),
        },
        {
            "action": act("click", index=8),
            "observation": screen(CLOCK, ACT, alarm_list(new_alarm_card(""))),
        },
        {
            "thinking": "The new alarm is expanded; its label row is 'Add label'.",
            "action": act("click", index=11),
            "observation": screen(CLOCK, ACT, label_dialog("")),
        },
        {
            "action": act("input_text", index=1, text="Gym"),
            "observation": screen(CLOCK, ACT, label_dialog("Gym")),
        },
        {
            "action": act("click", index=3),
            "observation": screen(CLOCK, ACT, alarm_list(new_alarm_card("Gym"))),
        },
    ],
}

MSG = "com.google.android.apps.messaging"
TEXT = "Running 10 minutes late, start without me!"


def conversations(top_preview: str | None = None) -> list[dict]:
    rows = [
        ("Maya Okafor", top_preview, "Now") if top_preview else None,
        ("Dad", "Sounds good, see you Sunday", "Sun"),
        ("Maya Okafor", "You: Shared the slides in the drive", "Tue") if not top_preview else None,
        (
            "Dentist Office",
            "Reminder: appointment Thu 12 Mar at 4:15 PM. Reply C to confirm.",
            "Mon",
        ),
    ]
    out = [
        el("TextView", "Messages", box=(63, 160, 500, 260)),
        el("ImageButton", desc="Search conversations", box=(840, 160, 950, 260), clickable=True),
        el("ImageButton", desc="Account and settings", box=(960, 160, 1068, 260), clickable=True),
    ]
    y = 330
    for row in rows:
        if row is None:
            continue
        name, preview, when = row
        out += [
            el(
                "TextView", name, box=(200, y, 800, y + 70), rid="conversation_name", clickable=True
            ),
            el("TextView", preview, box=(200, y + 75, 900, y + 135), rid="conversation_snippet"),
            el("TextView", when, box=(900, y, 1040, y + 70), rid="conversation_timestamp"),
        ]
        y += 200
    out.append(el("Button", "Start chat", box=(640, 2060, 1040, 2200), clickable=True))
    return out


def chat(draft: str = "", sent: str = "", delivered: bool = False) -> list[dict]:
    out = [
        el("ImageButton", desc="Back", box=(20, 150, 130, 260), clickable=True),
        el("TextView", "Maya Okafor", box=(160, 160, 700, 250)),
        el("ImageButton", desc="Call", box=(840, 150, 950, 260), clickable=True),
        el("ImageButton", desc="More options", box=(960, 150, 1068, 260), clickable=True),
        el(
            "TextView",
            "Are we still on for the 6 pm climbing session?",
            box=(40, 1500, 760, 1640),
            rid="message_text",
        ),
        el(
            "TextView",
            "Shared the slides in the drive",
            box=(400, 1680, 1040, 1780),
            rid="message_text",
        ),
        el("TextView", "Tuesday 5:41 PM", box=(700, 1790, 1040, 1840), rid="message_status"),
    ]
    if sent:
        out += [
            el("TextView", sent, box=(300, 1870, 1040, 1980), rid="message_text"),
            el(
                "TextView",
                "Now · Delivered" if delivered else "Sending…",
                box=(800, 1990, 1040, 2040),
                rid="message_status",
            ),
        ]
    out += [
        el("ImageButton", desc="Attach", box=(20, 2110, 130, 2220), clickable=True),
        el(
            "EditText",
            draft,
            hint="" if draft else "Text message",
            box=(150, 2100, 900, 2230),
            rid="compose_message_text",
            clickable=True,
            editable=True,
            focused=bool(draft),
        ),
        el(
            "ImageButton",
            desc="Send SMS" if draft else "Record voice message",
            box=(920, 2110, 1060, 2220),
            clickable=True,
        ),
    ]
    return out


ANDROID_MESSAGES = {
    "title": "Text Maya that I'm running late",
    "domain": "android",
    "task_instruction": f'Send Maya Okafor the SMS "{TEXT}"',
    "system_prompt": SYSTEM["android"],
    "tools": [],
    "tags": ["demo", "android", "messaging"],
    "metadata": {**META, "device": "Pixel 8 emulator, Android 15", "outcome": "success"},
    "steps": [
        {
            "state": "Home screen, unlocked.",
            "action": act("open_app", app_name="Messages"),
            "observation": screen(MSG, ".ui.ConversationListActivity", conversations()),
        },
        {
            "action": act("click", index=6),
            "observation": screen(MSG, ".ui.conversation.ConversationActivity", chat()),
        },
        {
            "action": act("input_text", index=8, text=TEXT),
            "observation": screen(MSG, ".ui.conversation.ConversationActivity", chat(TEXT)),
        },
        {
            "action": act("click", index=9),
            "observation": screen(MSG, ".ui.conversation.ConversationActivity", chat(sent=TEXT)),
        },
        {
            "action": act("wait"),
            "observation": screen(
                MSG, ".ui.conversation.ConversationActivity", chat(sent=TEXT, delivered=True)
            ),
        },
        {
            "action": act("navigate_back"),
            "observation": screen(
                MSG, ".ui.ConversationListActivity", conversations(f"You: {TEXT}")
            ),
        },
    ],
}

ANDROID = [ANDROID_CLOCK, ANDROID_MESSAGES]

# ------------------------------------------------------------------------------ web

SHOP_STYLE = """<style>
  body { font-family: system-ui, sans-serif; margin: 0; color: #1d2433; }
  header { display: flex; gap: 24px; align-items: center; padding: 14px 32px;
           background: #12355b; color: #fff; }
  header a { color: #fff; text-decoration: none; }
  header nav a { margin-left: 18px; }
  header .logo { font-weight: 700; font-size: 20px; margin-right: auto; }
  main { max-width: 880px; margin: 24px auto; padding: 0 24px; }
  table { border-collapse: collapse; width: 100%; }
  th, td { text-align: left; padding: 10px 8px; border-bottom: 1px solid #dde3ea; }
  .status { padding: 2px 8px; border-radius: 10px; background: #e3f4e8; font-size: 13px; }
  .status.transit { background: #fff4d6; }
  .btn { background: #1b6ef3; color: #fff; padding: 6px 12px; border-radius: 6px;
         text-decoration: none; font-size: 14px; }
  footer { color: #6b7685; font-size: 13px; text-align: center; padding: 24px; }
</style>"""

SHOP_HEADER = """<header>
  <a class="logo" href="/">Northwind Shop</a>
  <nav aria-label="Account">
    <a href="/account/orders" aria-current="page">Orders</a>
    <a href="/account/returns">Returns</a>
    <a href="/logout">Sign out</a>
  </nav>
</header>"""

ORDERS_HTML = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Your orders · Northwind Shop</title>
{SHOP_STYLE}
<script>window.nwAnalytics = window.nwAnalytics || []; nwAnalytics.push(["page", "orders"]);</script>
</head>
<body>
{SHOP_HEADER}
<main>
  <h1>Your orders</h1>
  <p>Signed in as <strong>Alex Kim</strong> · 3 orders in the last 6 months</p>
  <table>
    <thead><tr><th>Order</th><th>Placed</th><th>Items</th><th>Total</th><th>Status</th><th></th></tr></thead>
    <tbody>
      <tr><td>NW-20931</td><td>2 Mar 2026</td><td>Aria ANC wireless headphones, USB-C cable 2 m (×2)</td>
          <td>€185.00</td><td><span class="status">Delivered 5 Mar</span></td>
          <td><a class="btn" href="/account/orders/NW-20931">View order</a></td></tr>
      <tr><td>NW-20577</td><td>9 Feb 2026</td><td>Trail running socks (3-pack)</td>
          <td>€24.90</td><td><span class="status">Delivered 12 Feb</span></td>
          <td><a class="btn" href="/account/orders/NW-20577">View order</a></td></tr>
      <tr><td>NW-21044</td><td>10 Mar 2026</td><td>Desk lamp, warm white</td>
          <td>€39.00</td><td><span class="status transit">In transit</span></td>
          <td><a class="btn" href="/account/orders/NW-21044">View order</a></td></tr>
    </tbody>
  </table>
</main>
<footer>© 2026 Northwind Shop GmbH · Prices include VAT</footer>
</body>
</html>"""

POLICY_HTML = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Return policy · Northwind Shop</title>
{SHOP_STYLE}
</head>
<body>
{SHOP_HEADER}
<main>
  <h1>Return policy</h1>
  <p>You can return most items within <strong>30 days of delivery</strong> for a full refund.</p>
  <h2>How it works</h2>
  <ol>
    <li>Open the order and choose <em>Return item</em> next to the product.</li>
    <li>Tell us why, and pick a refund to your original payment method or store credit (+5%).</li>
    <li>Print the prepaid label and drop the parcel at any DHL point within 7 days.</li>
  </ol>
  <h2>Exceptions</h2>
  <ul>
    <li>Opened software and gift cards cannot be returned.</li>
    <li>Headphones and earbuds must include all ear tips; hygiene seals may be broken.</li>
    <li>Defective items are covered by the 2-year warranty after the return window.</li>
  </ul>
  <p>Refunds reach your account 3-5 business days after the item arrives at our warehouse.</p>
</main>
<footer>© 2026 Northwind Shop GmbH · Prices include VAT</footer>
</body>
</html>"""

ORDER_TREE = """[1] RootWebArea "Order NW-20931 · Northwind Shop" [focused]
  [2] banner
    [3] link "Northwind Shop"
    [4] navigation "Account"
      [5] link "Orders" [current=page]
      [6] link "Returns"
      [7] link "Sign out"
  [8] main
    [9] heading "Order NW-20931" [level=1]
    [10] StaticText "Placed 2 March 2026 · Delivered 5 March 2026 · Paid with Visa ending 4417"
    [11] table "Items"
      [12] row "Aria ANC wireless headphones 1 €149.00"
        [13] cell "Aria ANC wireless headphones"
        [14] cell "1"
        [15] cell "€149.00"
        [16] button "Return item"
      [17] row "USB-C cable 2 m 2 €36.00"
        [18] cell "USB-C cable 2 m"
        [19] cell "2"
        [20] cell "€36.00"
        [21] button "Return item"
    [22] StaticText "Items can be returned within 30 days of delivery (until 4 April 2026)."
    [23] link "Return policy"
  [24] contentinfo
    [25] StaticText "© 2026 Northwind Shop GmbH · Prices include VAT\""""


def return_form(reason: str, comment: str) -> str:
    chosen = reason or "Choose a reason"
    continue_attrs = "" if reason else " [disabled]"
    comment_attrs = f' [value="{comment}"] [focused]' if comment else ""
    return f"""[1] RootWebArea "Return an item · Northwind Shop" [focused]
  [2] banner
    [3] link "Northwind Shop"
    [4] navigation "Account"
      [5] link "Orders"
      [6] link "Returns" [current=page]
      [7] link "Sign out"
  [8] main
    [30] heading "Return Aria ANC wireless headphones" [level=1]
    [31] StaticText "Order NW-20931 · return window open until 4 April 2026"
    [32] combobox "Reason for return" [value="{chosen}"] [expanded=false]
    [33] radio "Refund to original payment method" [checked=true]
    [34] radio "Store credit (+5% bonus)" [checked=false]
    [35] textbox "Comments (optional)"{comment_attrs}
    [36] button "Continue"{continue_attrs}
  [24] contentinfo
    [25] StaticText "© 2026 Northwind Shop GmbH · Prices include VAT\""""


REASON = "Defective or stopped working"
COMMENT = "Noise cancelling stopped working after a week; the left ear crackles."
WEB = {
    "title": "Start a return for faulty headphones (Northwind Shop)",
    "domain": "web",
    "task_instruction": (
        "On shop.northwind.example, check the return window for order NW-20931 and start a "
        "return for the Aria headphones, which stopped noise cancelling. Refund to the card."
    ),
    "system_prompt": SYSTEM["web"],
    "tools": [],
    "tags": ["demo", "shopping", "html", "accessibility-tree"],
    "metadata": {**META, "browser": "Chromium 134, 1280x800", "outcome": "success"},
    "steps": [
        {
            "state": "Browser with an empty tab; the user is signed in to the shop.",
            "action": 'goto("https://shop.northwind.example/account/orders")',
            "observation": ORDERS_HTML,
        },
        {
            "action": 'click(text="View order", row="NW-20931")',
            "observation": ORDER_TREE,
        },
        {
            "thinking": "Check the policy for anything special about headphones first.",
            "action": 'click("23")',
            "observation": POLICY_HTML,
        },
        {
            "action": "go_back()",
            "observation": ORDER_TREE,
        },
        {
            "action": 'click("16")',
            "observation": return_form("", ""),
        },
        {
            "action": f'select_option("32", "{REASON}")',
            "observation": return_form(REASON, ""),
        },
        {
            "action": f'fill("35", "{COMMENT}")',
            "observation": return_form(REASON, COMMENT),
        },
        {
            "action": 'click("36")',
            "observation": """[1] RootWebArea "Return started · Northwind Shop" [focused]
  [2] banner
    [3] link "Northwind Shop"
  [8] main
    [40] heading "Return RMA-55812 started" [level=1]
    [41] StaticText "Aria ANC wireless headphones · €149.00 back to Visa ending 4417 once the item arrives"
    [42] link "Download prepaid return label (PDF)"
    [43] StaticText "Drop the parcel at any DHL point by 18 March 2026."
    [44] link "Back to order NW-20931\"""",
        },
    ],
}

# ------------------------------------------------------------------------------ OS

TOP_BAR = "[Top bar] Activities · Wed 11 Mar {time} · Wi-Fi · Volume · Battery 82%"
SIDEBAR = [
    "Recent",
    "Starred",
    "Home",
    "Documents",
    "Downloads",
    "Music",
    "Pictures",
    "Videos",
    "Trash",
]


def files_window(
    place: str,
    path: str,
    items: list[str],
    *,
    time: str,
    view: str = "list, sorted by name",
    selected: str = "",
    status: str = "",
    search: str = "",
    extra: str = "",
) -> str:
    side = " · ".join(f"[{s}]" if s == place else s for s in SIDEBAR)
    lines = [
        TOP_BAR.format(time=time),
        f"[Window] Files — {path.rsplit(' › ', 1)[-1]} (focused, maximised)",
        f"  Header: Back · Forward · Path bar: {path} · Search · View options · Menu",
    ]
    if search:
        lines.append(f'  Search bar: "{search}" (searching in {path.rsplit(" › ", 1)[-1]})')
    lines += [f"  Sidebar: {side}", f"  View: {view}"]
    lines += [f"  {row}" for row in items] if items else ["  (Folder is empty)"]
    lines.append(f"  Status: {status or f'{len(items) - 1 if items else 0} items'}")
    if selected:
        lines.append(f"  Selected: {selected}")
    if extra:
        lines.append(extra)
    return "\n".join(lines)


HDR = "Name                          Size      Type            Modified"
DOWNLOADS = [
    "team-offsite-photos.zip       214.7 MB  Zip archive     Yesterday",
    "ubuntu-24.04.2-desktop.iso    6.0 GB    Disk image      28 Feb",
    "quote_2026-01_brightway.pdf   61.2 kB   PDF document    14 Jan",
    "invoice_2025-12_acme.pdf      88.4 kB   PDF document    5 Jan",
    "invoice_2025-11_acme.pdf      87.9 kB   PDF document    2 Dec 2025",
    "invoice_2025-10_acme.pdf      90.1 kB   PDF document    3 Nov 2025",
]
INVOICES = [row for row in DOWNLOADS if row.startswith("invoice_2025")]
SEL3 = "invoice_2025-12_acme.pdf, invoice_2025-11_acme.pdf, invoice_2025-10_acme.pdf"

OS_FILES_AWB = {
    "task": "os",
    "id": "os-demo-0031",
    "system_str": SYSTEM["os"],
    "task_instruction": (
        "In the Files app, move the three 2025 invoice PDFs from Downloads into "
        "Documents/Invoices/2025, creating that folder if it does not exist."
    ),
    "turns": [
        {
            "state": (
                "GNOME-like desktop for user sam. The Files window is open at Home in icon view; "
                "no other windows are open."
            ),
            "action": 'double_click(item="Downloads")',
            "observation": files_window(
                "Downloads",
                "Home › Downloads",
                [HDR, *DOWNLOADS],
                time="10:48",
                view="list, sorted by Modified (newest first)",
            ),
        },
        {
            "action": 'key("ctrl+f"); type("invoice_2025")',
            "observation": files_window(
                "Downloads",
                "Home › Downloads",
                [HDR, *INVOICES],
                time="10:48",
                view="list, sorted by Modified (newest first)",
                search="invoice_2025",
            ),
        },
        {
            "action": 'key("ctrl+a")',
            "observation": files_window(
                "Downloads",
                "Home › Downloads",
                [HDR, *INVOICES],
                time="10:48",
                view="list, sorted by Modified (newest first)",
                search="invoice_2025",
                status="3 items selected (266.4 kB)",
                selected=SEL3,
            ),
        },
        {
            "action": 'key("ctrl+x")',
            "observation": files_window(
                "Downloads",
                "Home › Downloads",
                [HDR, *INVOICES],
                time="10:49",
                view="list, sorted by Modified (newest first); the 3 cut items are dimmed",
                search="invoice_2025",
                status='"3 items" will be moved if you select the Paste command',
                selected=SEL3,
            ),
        },
        {
            "action": 'click(sidebar="Documents")',
            "observation": files_window(
                "Documents",
                "Home › Documents",
                [
                    HDR,
                    "Contracts                     4 items   Folder          12 Jan",
                    "Invoices                      1 item    Folder          8 Jan 2025",
                    "Notes                         17 items  Folder          Yesterday",
                    "tax-return-2024.pdf           412.0 kB  PDF document    30 Jun 2025",
                ],
                time="10:49",
            ),
        },
        {
            "action": 'double_click(item="Invoices")',
            "observation": files_window(
                "",
                "Home › Documents › Invoices",
                [HDR, "2024                          12 items  Folder          8 Jan 2025"],
                time="10:49",
                status="1 item",
            ),
        },
        {
            "action": 'key("ctrl+shift+n")',
            "observation": files_window(
                "",
                "Home › Documents › Invoices",
                [HDR, "2024                          12 items  Folder          8 Jan 2025"],
                time="10:49",
                status="1 item",
                extra=(
                    "[Dialog] New Folder (modal, focused)\n"
                    '  Folder name: "" (text field, focused)\n'
                    "  Buttons: Cancel · Create (disabled)"
                ),
            ),
        },
        {
            "action": 'type("2025"); key("enter")',
            "observation": files_window(
                "",
                "Home › Documents › Invoices",
                [
                    HDR,
                    "2024                          12 items  Folder          8 Jan 2025",
                    "2025                          0 items   Folder          10:49",
                ],
                time="10:49",
                status='"2025" selected (containing 0 items)',
                selected="2025",
            ),
        },
        {
            "action": 'double_click(item="2025"); key("ctrl+v")',
            "observation": files_window(
                "",
                "Home › Documents › Invoices › 2025",
                [
                    HDR,
                    "invoice_2025-10_acme.pdf      90.1 kB   PDF document    3 Nov 2025",
                    "invoice_2025-11_acme.pdf      87.9 kB   PDF document    2 Dec 2025",
                    "invoice_2025-12_acme.pdf      88.4 kB   PDF document    5 Jan",
                ],
                time="10:50",
                status="3 items selected (266.4 kB)",
                selected=SEL3,
            ),
        },
        {
            "action": 'click(sidebar="Downloads")',
            "observation": files_window(
                "Downloads",
                "Home › Downloads",
                [HDR, *[row for row in DOWNLOADS if row not in INVOICES]],
                time="10:50",
                view="list, sorted by Modified (newest first)",
            ),
        },
    ],
}

SETTINGS_SIDEBAR = [
    "Wi-Fi",
    "Network",
    "Bluetooth",
    "Displays",
    "Sound",
    "Power",
    "Multitasking",
    "Appearance",
    "Apps",
    "Notifications",
    "Privacy & Security",
]


def settings(panel: str, body: list[str], *, time: str, dark: bool = False, night: bool = False):
    side = " · ".join(f"[{s}]" if s == panel else s for s in SETTINGS_SIDEBAR)
    bar = TOP_BAR.format(time=time) + (" · Night Light on" if night else "")
    return "\n".join(
        [
            bar,
            f"[Window] Settings — {panel} (focused, 960×720, {'dark' if dark else 'light'} style)",
            f"  Sidebar: {side}",
            *[f"  {line}" for line in body],
        ]
    )


DISPLAYS = [
    "Panel: Displays",
    '  Built-in display · 14" · Resolution 1920 × 1200 (16:10) · Refresh rate 60.00 Hz',
    "  Orientation: Landscape · Scale: 100% (200% available)",
    "  Night Light: Off  >",
]


def night_light(on: bool) -> list[str]:
    return [
        "Panel: Displays › Night Light  (Back button at top left)",
        f"  Night Light  [toggle: {'On' if on else 'Off'}]",
        f"  Schedule: (•) Sunset to Sunrise  ( ) Manual Schedule{'' if on else '  (greyed out)'}",
        "  Sunset to Sunrise: 18:21 – 06:52 (from location: Berlin)",
        f"  Color Temperature: slider at 50% (more warm ← → less warm){'' if on else ' (greyed out)'}",
    ]


def appearance(dark: bool) -> list[str]:
    return [
        "Panel: Appearance",
        f"  Style: {'( ) Default  (•) Dark' if dark else '(•) Default  ( ) Dark'}  (two preview thumbnails)",
        "  Accent color: Blue (selected) · Teal · Green · Yellow · Orange · Red · Pink · Purple",
        "  Background: 6 wallpaper thumbnails, 'Fold' selected · Add Picture…",
    ]


OS_SETTINGS = {
    "title": "Turn on Night Light and switch to the dark style",
    "domain": "os",
    "task_instruction": (
        "Turn on Night Light on a sunset-to-sunrise schedule and switch the desktop to the "
        "dark style."
    ),
    "system_prompt": SYSTEM["os"],
    "tools": [],
    "tags": ["demo", "desktop", "settings"],
    "metadata": {**META, "desktop": "GNOME 47 (Wayland)", "outcome": "success"},
    "steps": [
        {
            "state": "Empty desktop, no windows open.",
            "action": 'key("super"); type("settings")',
            "observation": "\n".join(
                [
                    TOP_BAR.format(time="20:04"),
                    "[Overview] Activities search (focused)",
                    '  Search field: "settings"',
                    "  Applications: [Settings] (highlighted) · Extensions · Software",
                    "  Settings results: Power Mode · Display Settings · Sound Settings",
                    "  Files: settings-backup.json (~/Documents/Notes)",
                ]
            ),
        },
        {
            "action": 'key("enter")',
            "observation": settings(
                "Wi-Fi",
                [
                    "Panel: Wi-Fi",
                    "  Wi-Fi [toggle: On]",
                    "  Visible networks: northwind-guest (connected, strong) · FRITZ!Box 7590 RX "
                    "(secured) · DIRECT-4A-HP LaserJet",
                ],
                time="20:04",
            ),
        },
        {
            "action": 'click(sidebar="Displays")',
            "observation": settings("Displays", DISPLAYS, time="20:04"),
        },
        {
            "action": 'click("Night Light")',
            "observation": settings("Displays", night_light(False), time="20:05"),
        },
        {
            "action": 'click(toggle="Night Light")',
            "observation": settings("Displays", night_light(True), time="20:05", night=True),
        },
        {
            "action": 'click(sidebar="Appearance")',
            "observation": settings("Appearance", appearance(False), time="20:05", night=True),
        },
        {
            "action": 'click("Dark")',
            "observation": settings(
                "Appearance", appearance(True), time="20:05", dark=True, night=True
            ),
        },
    ],
}
