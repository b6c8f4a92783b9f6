"""Webhooks (cnkispider.watch.notify) against a real local HTTP receiver."""

from __future__ import annotations

import logging
import time

import pytest

from cnkispider.config import ConfigError, load_config
from cnkispider.watch.notify import Notifier
from tests.fixtures.receiver import Receiver


@pytest.fixture
def receiver():
    made = []

    def make(**kwargs):
        r = Receiver(**kwargs)
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


@pytest.mark.parametrize(
    ("fmt", "expected"),
    [
        ("dingtalk", {"msgtype": "text", "text": {"content": "cnkispider: task t1 finished"}}),
        ("wecom", {"msgtype": "text", "text": {"content": "cnkispider: task t1 finished"}}),
        ("feishu", {"msg_type": "text", "content": {"text": "cnkispider: task t1 finished"}}),
    ],
)
def test_each_robot_format_gets_its_own_json_shape(receiver, fmt, expected):
    r = receiver()
    notifier = Notifier([r.url + "/robot/send?access_token=abc"], fmt, timeout=2, task="t1")
    notifier.spider_closed(None, "finished")
    assert r.bodies == [
        {
            "path": "/robot/send?access_token=abc",
            "type": "application/json; charset=utf-8",
            "json": expected,
        }
    ]


def test_plain_json_names_the_event_and_the_task_and_goes_to_every_webhook(receiver):
    first, second = receiver(), receiver()
    notifier = Notifier([first.url, second.url], "json", timeout=2, task="patents")
    notifier.send("waiting", "task patents: waiting: CNKI wants a person to pass its check")
    notifier.send("waiting", "said once only")
    notifier.task_halted(reason="rejected: 参数校验")
    notifier.wait()
    for r in (first, second):
        events = [b["json"]["event"] for b in r.bodies]
        assert sorted(events) == ["halted", "waiting"]
        waiting = next(b["json"] for b in r.bodies if b["json"]["event"] == "waiting")
        assert waiting["task"] == "patents" and "person" in waiting["text"]
    halted = next(b["json"] for b in first.bodies if b["json"]["event"] == "halted")
    assert "参数校验" in halted["text"]


@pytest.mark.timing  # asserts a wall-clock bound: `make test` runs it apart, after the parallel pass
def test_a_failing_webhook_is_logged_once_and_the_others_still_get_it(receiver, caplog):
    broken, good = receiver(status=500), receiver()
    dead = "http://127.0.0.1:9/hook?access_token=SECRET123"  # nothing listens on port 9
    notifier = Notifier([broken.url, dead, good.url], "json", timeout=1, task="t")
    with caplog.at_level(logging.WARNING, logger="cnkispider.notify"):
        started = time.monotonic()
        notifier.send("waiting", "one")
        assert time.monotonic() - started < 0.5  # never waits for the network
        notifier.send("halted", "two")
        notifier.wait()
    assert len(good.bodies) == 2
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines  # the 500 once, the dead one once
    assert not any("SECRET123" in line for line in lines)


@pytest.mark.timing  # asserts a wall-clock bound: `make test` runs it apart, after the parallel pass
def test_a_slow_webhook_times_out_without_stopping_anything(receiver, caplog):
    slow = receiver(delay=3.0)
    notifier = Notifier([slow.url], "json", timeout=0.5, task="t")
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="cnkispider.notify"):
        notifier.send("finished", "done")
        notifier.wait()
    assert time.monotonic() - started < 2.5
    assert any("failed" in r.getMessage() for r in caplog.records)


def test_config_takes_several_webhooks_and_checks_the_format(tmp_path):
    ini = tmp_path / "config.ini"
    ini.write_text(
        "[notify]\nwebhook = https://oapi.dingtalk.com/robot/send?access_token=a,\n"
        "  https://open.feishu.cn/open-apis/bot/v2/hook/b\nformat = feishu\n",
        encoding="utf-8",
    )
    config = load_config(ini, environ={})
    assert config.raw["notify"]["webhook"] == [
        "https://oapi.dingtalk.com/robot/send?access_token=a",
        "https://open.feishu.cn/open-apis/bot/v2/hook/b",
    ]
    assert config.raw["notify"]["format"] == "feishu"
    ini.write_text("[notify]\nformat = slack\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"\[notify\] format"):
        load_config(ini, environ={})
    ini.write_text("[notify]\nwebhook = ftp://x\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="webhook"):
        load_config(ini, environ={})


def test_the_waiting_message_links_the_pass_desk_when_the_page_has_a_public_address(
    receiver, tmp_path
):
    """[web] public_url set: the person passes from the message (issue 40); unset: no link."""
    linked, plain = receiver(), receiver()
    desk = Notifier([linked.url], "json", timeout=2, task="t", public_url="https://c.example/")
    desk.send("waiting", "task t: waiting: CNKI wants a person to pass its check")
    desk.send("finished", "task t: finished")
    bare = Notifier([plain.url], "json", timeout=2, task="t")
    bare.send("waiting", "task t: waiting: CNKI wants a person to pass its check")
    desk.wait()
    bare.wait()
    texts = {b["json"]["event"]: b["json"]["text"] for b in linked.bodies}
    assert texts["waiting"].endswith("pass it here: https://c.example/desk")
    assert "/desk" not in texts["finished"]
    assert "/desk" not in plain.bodies[0]["json"]["text"]
    ini = tmp_path / "config.ini"
    ini.write_text("[web]\npublic_url = https://c.example/x/\n", encoding="utf-8")
    config = load_config(ini, environ={})
    assert config.raw["web"]["public_url"] == "https://c.example/x"
    from cnkispider.launch.crawlsettings import crawler_settings

    assert crawler_settings(config)["WEB_PUBLIC_URL"] == "https://c.example/x"
    ini.write_text("[web]\npublic_url = c.example\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="public_url"):
        load_config(ini, environ={})
