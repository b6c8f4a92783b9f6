"""Export memory: `cnkispider export` streams, so its memory does not grow with the table.

    python bench/export_memory.py [--rows 100000] [--batch 1000] [--mysql mysql+pymysql://root@127.0.0.1:3306]

Fills a fresh SQLite database (and, with ``--mysql``, a fresh database on that MariaDB server,
dropped afterwards) with N synthetic patents of realistic size (Chinese titles, applicants,
addresses, a 200-300 character abstract, a 300-500 character main claim: about 2.5 KB a row
as UTF-8), written with ``storage.upsert_documents`` in batches of 1000. Then exports them to CSV,
each export in a fresh subprocess so that its peak resident memory (``ru_maxrss``) is its own:

  stream     ``cnkispider.output.export.export`` (keyset pages of ``--batch`` rows)
  fetch-all  the naive way, for comparison: one SELECT of the whole table, ``.all()``, then write

and prints peak RSS, the part of it the export added (peak minus the resident memory just before
exporting, with the same imports and an open engine), wall time and rows per second.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import sqlalchemy as sa  # noqa: E402

from cnkispider.items import FIELDS  # noqa: E402
from cnkispider.output.export import columns, export  # noqa: E402
from cnkispider.store.db import open_database  # noqa: E402
from cnkispider.store.schema import documents  # noqa: E402
from cnkispider.store.storage import chunked, row_for, upsert_documents  # noqa: E402

WORDS = (
    "一种 基于 深度学习 的 图像 识别 方法 装置 系统 及其 应用 数据 处理 模型 训练 神经网络 特征 提取 "
    "传感器 控制 模块 信号 通信 无线 终端 设备 存储 介质 计算机 程序 产品 电池 材料 制备 工艺 "
    "结构 组件 连接 固定 支撑 调节 检测 监测 分析 优化 算法 服务器 客户端 用户 接口 显示 屏幕"
).split()
PLACES = (
    "北京市海淀区",
    "上海市浦东新区",
    "广东省深圳市南山区",
    "浙江省杭州市西湖区",
    "江苏省南京市鼓楼区",
)
ORGS = (
    "华为技术有限公司",
    "清华大学",
    "中国科学院自动化研究所",
    "腾讯科技（深圳）有限公司",
    "浙江大学",
)
NAMES = ("张伟", "王芳", "李娜", "刘洋", "陈静", "杨磊", "赵敏", "黄强")


def text(rng: random.Random, chars: int) -> str:
    out, n = [], 0
    while n < chars:
        word = rng.choice(WORDS)
        out.append(word)
        n += len(word)
        if rng.random() < 0.08:
            out.append(rng.choice("，；。、"))
    return "".join(out)


def synthetic(i: int, rng: random.Random) -> dict:
    day = f"2024-{1 + i % 12:02d}-{1 + i % 28:02d}"
    row = {name: "" for name in FIELDS["patent"]}
    row.update(
        dbname="SCPD",
        filename=f"CN{i:09d}A",
        title=text(rng, rng.randint(15, 40)),
        source="中国专利",
        date=day,
        database="专利",
        patent_type="发明公开",
        application_no=f"CN2024{i:07d}.{i % 10}",
        application_date=day,
        publication_no=f"CN11{i:07d}A",
        publication_date=day,
        applicant=rng.choice(ORGS),
        address=rng.choice(PLACES) + f"中关村大街{i % 300}号",
        inventors=";".join(rng.sample(NAMES, rng.randint(1, 5))),
        ipc=f"G06F{i % 30}/{i % 100:02d};G06N3/08",
        main_ipc=f"G06F{i % 30}/{i % 100:02d}",
        province_code="11",
        agency="北京集佳知识产权代理有限公司",
        agent=rng.choice(NAMES),
        pages=str(rng.randint(8, 40)),
        abstract=text(rng, rng.randint(200, 300)),
        claim=text(rng, rng.randint(300, 500)),
    )
    return row


def fill(url: str, rows: int) -> float:
    engine = open_database(url)
    rng = random.Random(1)
    started = time.monotonic()
    stamp = dt.datetime(2024, 6, 1, 12, 0, 0)
    try:
        for chunk in chunked(range(rows), 1000):
            with engine.begin() as conn:
                upsert_documents(
                    conn, "patent", [row_for("patent", synthetic(i, rng), 1, stamp) for i in chunk]
                )
    finally:
        engine.dispose()
    return time.monotonic() - started


def current_rss_kb() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * resource.getpagesize() // 1024


def reset_peak() -> bool:
    """Reset the kernel's peak-RSS mark (Linux >= 4.0), which the imports have set higher than
    any export: writing 5 to clear_refs starts VmHWM again from the current RSS."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def peak_rss_kb() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def child(mode: str, url: str, out: str, batch: int) -> dict:
    """One export in this (fresh) process; its own peak RSS."""
    engine = open_database(url, create=False)
    with engine.connect() as conn:  # warm the pool and the dialect, as both modes need them
        conn.execute(sa.select(1))
    before = current_rss_kb()
    if not reset_peak():
        print("warning: cannot reset the peak RSS mark; peaks include the imports", file=sys.stderr)
    started = time.monotonic()
    if mode == "stream":
        count, _ = export(engine, "patent", out, "csv", batch=batch)
    else:
        table = documents["patent"]
        with engine.connect() as conn:
            rows = conn.execute(sa.select(table).order_by(table.c.id)).mappings().all()
        names = columns("patent")
        with open(out, "w", encoding="utf-8-sig", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(names)
            for row in rows:
                writer.writerow(["" if row[n] is None else str(row[n]) for n in names])
        count = len(rows)
    seconds = time.monotonic() - started
    peak = peak_rss_kb()
    engine.dispose()
    return {"rows": count, "seconds": seconds, "peak_kb": peak, "before_kb": before}


def run_child(mode: str, url: str, out: Path, batch: int) -> dict:
    done = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            mode,
            "--url",
            url,
            "--out",
            str(out),
            "--batch",
            str(batch),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["bytes"] = out.stat().st_size
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument(
        "--mysql", help="a MariaDB/MySQL server URL without a database, to bench it too"
    )
    parser.add_argument("--child", choices=("stream", "fetch-all"), help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.url, args.out, args.batch)))
        return 0

    results = []
    with tempfile.TemporaryDirectory(prefix="bench-export-") as tmp:
        targets = [("sqlite", f"sqlite:///{Path(tmp) / 'bench.db'}", None)]
        if args.mysql:
            name = f"cnkibench_{uuid.uuid4().hex[:8]}"
            targets.append(("mariadb", f"{args.mysql.rstrip('/')}/{name}?charset=utf8mb4", name))
        try:
            for label, url, _ in targets:
                filled = fill(url, args.rows)
                print(f"{label}: {args.rows:,} rows inserted in {filled:.1f} s", file=sys.stderr)
                for mode in ("stream", "fetch-all"):
                    result = run_child(mode, url, Path(tmp) / f"{label}-{mode}.csv", args.batch)
                    results.append((label, mode, result))
                    print(f"{label} {mode}: done", file=sys.stderr)
        finally:
            for _label, _url, name in targets:
                if name:
                    server = sa.create_engine(args.mysql, isolation_level="AUTOCOMMIT")
                    with server.connect() as conn:
                        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{name}`")
                    server.dispose()

    print(
        f"\nexport of {args.rows:,} patents to CSV (batch {args.batch}), peak RSS of the exporting process"
    )
    print(
        f"{'database':<9} {'mode':<10} {'rows':>8} {'CSV MB':>7} {'peak RSS MB':>12} {'added by export MB':>19} "
        f"{'seconds':>8} {'rows/s':>8}"
    )
    for label, mode, r in results:
        print(
            f"{label:<9} {mode:<10} {r['rows']:>8,} {r['bytes'] / 2**20:>7.0f} {r['peak_kb'] / 1024:>12.0f} "
            f"{(r['peak_kb'] - r['before_kb']) / 1024:>19.0f} {r['seconds']:>8.1f} {r['rows'] / r['seconds']:>8,.0f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
