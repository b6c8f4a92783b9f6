"""The web page's words in the operator's language: Chinese or English.

The language is the one the page was asked in (``?lang=zh`` or ``?lang=en``, kept in a cookie
for the next pages: the switch in the header), else the browser's first choice
(``Accept-Language``: a ``zh`` tag gives Chinese), else English. The labels are translated;
what comes from the database or CNKI (names, reasons, notes, the actions' sentences, which
are the command line's) is shown as it is.
"""

from __future__ import annotations

LANGUAGES = ("zh", "en")
COOKIE = "lang"

ZH = {
    # the header and the list of tasks
    "Tasks": "任务",
    "task": "任务",
    "add a session": "添加会话",
    "type": "类型",
    "phase": "阶段",
    "state": "状态",
    "rounds finished": "已完成轮次",
    "in flight": "进行中",
    "documents": "文献",
    "rate": "速率",
    "rounds/h": "轮/小时",
    "ETA": "预计剩余",
    "last heartbeat": "最后心跳",
    "ago": "前",
    "progress": "进度",
    "no tasks yet": "尚无任务",
    "Recent actions": "最近操作",
    "when (UTC)": "时间 (UTC)",
    "who": "操作者",
    "action": "操作",
    "what": "内容",
    "none yet": "暂无",
    "none": "无",
    # a task's page
    "cursor": "游标",
    "query": "检索式",
    "of": "/",
    "up to today": "至今天",
    "Coverage": "覆盖",
    "Workers": "工作进程",
    "host": "主机",
    "heartbeat": "心跳",
    "rounds": "轮次",
    "pages/min": "页/分钟",
    "pages": "页",
    "items": "条目",
    "errors": "错误",
    "challenges": "验证",
    "last error": "最近错误",
    "Rounds in flight": "进行中的轮次",
    "round": "轮次",
    "worker": "工作进程",
    "attempts": "尝试次数",
    "Errors by reason": "错误（按原因）",
    "table": "表",
    "reason": "原因",
    "rows": "行数",
    "Throughput": "吞吐量",
    "depth": "深度",
    "Fields filled": "字段填充率",
    "field": "字段",
    "filled": "已填",
    "no round stored yet": "尚无已存储的轮次",
    "Share of the documents of the latest rounds (those a field applies to) on which the parser filled each field; a field that drops to none while it was filled on most documents halts the task (markup drift, docs/FIELDS.md).": "最近几轮文献中（仅计该字段适用的文献）解析器填出各字段的比例；某字段曾在大多数文献上有值、突然全部为空时，任务会中止（页面结构变化，见 docs/FIELDS.md）。",
    "no samples yet": "尚无采样数据",
    "documents/min": "文献/分钟",
    "challenges/min": "验证/分钟",
    "Sampled by this page's server since it started (pages/min, documents/min and challenges/min between samples; challenges: CNKI's verify and captcha pages, the soft block, JavaScript pages and a verified session checked again, as the workers' heartbeats count them; waiting for a person: 1 while a worker waits for one).": "由本页面的服务器自启动起采样（页/分钟、文献/分钟和验证/分钟均为两次采样之间的速率；"
    "验证：知网的验证页与验证码页、软封锁、纯 JavaScript 页面，以及已验证会话被再次检查，"
    "按工作进程心跳的计数；等待人工验证：有工作进程在等人时为 1）。",
    "day": "日",
    # the grid's legend and states
    "pending": "待爬",
    "in-flight": "进行中",
    "done": "完成",
    "failed": "失败",
    "out of balance": "账目不平",
    "unbalanced": "账目不平",
    # the actions
    "pause": "暂停",
    "resume": "继续",
    "stop": "停止",
    "extend": "延长",
    "move": "移动",
    "recrawl": "重爬错误",
    "Preview": "预览",
    "Confirm": "确认",
    "back to the task": "返回任务",
    "token": "令牌",
    # states of a task
    "running": "运行中",
    "finished": "已完成",
    "stopped": "已停止",
    "paused": "已暂停",
    "halted": "已中止",
    "no live worker": "无存活的工作进程",
    "waiting for a person": "等待人工验证",
}
WORDS = {"zh": ZH, "en": {}}


def language(query: dict, cookies: dict, accept_language: str | None) -> str:
    """The page's language: ``?lang=``, then the cookie, then the browser's first choice."""
    for chosen in (query.get("lang"), cookies.get(COOKIE)):
        if chosen in LANGUAGES:
            return chosen
    first = (accept_language or "").split(",")[0].split(";")[0].strip().lower()
    return "zh" if first.startswith("zh") else "en"


def translator(lang: str):
    """``_(text)``: the label in ``lang`` (the English text itself when it has no translation)."""
    words = WORDS.get(lang, {})
    return lambda text: words.get(text, text)
