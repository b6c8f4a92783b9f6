"""Page parsers against real CNKI pages (../shared/cnki/pages) and the hand-made fixtures."""

from __future__ import annotations

import dataclasses
import re

import pytest

from cnkispider.cnki.detailpage import (
    DETAIL_FIELDS,
    normalize_label,
    parse_detail,
    parse_paper,
    parse_patent,
)
from cnkispider.cnki.listgrid import ListRow, parse_list
from cnkispider.exceptions import RefusedPage
from cnkispider.items import FIELDS, LIST_FIELDS
from tests.fixtures.pages import all_cases, load, real_page

CASES = all_cases()
DETAIL_CASES = [c for c in CASES if "fields" in c.expected]
LIST_CASES = [c for c in CASES if "list" in c.expected]
REFUSED_CASES = [c for c in CASES if c.expected.get("parser_refusal")]
ROW_FIELDS = [f.name for f in dataclasses.fields(ListRow)]


def parse_case(case):
    if case.expected["kind"] == "list":
        return parse_list(case.body, case.expected.get("doc_type"))
    return parse_detail(case.expected.get("doc_type", "paper"), case.body)


# -- the real kns8s list page ---------------------------------------------------------------


@pytest.fixture(scope="module")
def real_list_raw() -> bytes:
    return real_page("kns8s_list_crossdb_p1.html")


@pytest.fixture(scope="module")
def real_list(real_list_raw):
    return parse_list(real_list_raw)


def test_real_list_total(real_list):
    assert real_list.total == 661


def test_real_list_page_count_and_page(real_list):
    assert (real_list.page_count, real_list.page) == (34, 1)


def test_real_list_has_twenty_rows(real_list):
    assert len(real_list.rows) == 20


def test_real_list_ids_match_the_raw_markup(real_list, real_list_raw):
    """dbname/filename of every row, against a regex over the raw bytes (no DOM involved)."""
    tags = re.findall(rb'<a class="icon-collect"[^>]*>', real_list_raw)
    expected = [
        (
            re.search(rb'data-dbname="([^"]*)"', tag).group(1).decode(),
            re.search(rb'data-filename="([^"]*)"', tag).group(1).decode(),
        )
        for tag in tags
    ]
    assert len(expected) == 20
    assert expected[0] == ("CAPJ", "HJXB20260618001")  # the regex itself reads the right thing
    assert [(r.dbname, r.filename) for r in real_list.rows] == expected


def test_real_list_counts_match_the_raw_markup(real_list, real_list_raw):
    """被引 and 下载 of every row, against a regex over the raw cells: an empty td.quote is 0."""
    quotes = re.findall(rb'<td class="quote">(.*?)</td>', real_list_raw, re.S)
    downloads = re.findall(rb'<a class="downloadCnt"[^>]*>([^<]*)</a>', real_list_raw)
    assert len(quotes) == len(downloads) == 20
    expected = [
        (re.sub(rb"<[^>]+>", b"", q).strip().decode() or "0", d.decode())
        for q, d in zip(quotes, downloads, strict=True)
    ]
    assert expected[0] == ("0", "37")  # the first row: nobody cited it yet, 37 downloads
    assert [(r.cited, r.downloads) for r in real_list.rows] == expected
    assert all(r.downloads.isdigit() for r in real_list.rows)


def test_real_list_export_ids_are_the_opaque_cbitem_values(real_list, real_list_raw):
    values = re.findall(rb'<input class="cbItem"[^>]*value="([^"]*)"', real_list_raw)
    assert len(values) == 20
    assert [r.export_id for r in real_list.rows] == [v.decode() for v in values]
    assert real_list.rows[0].export_id.startswith("kd9kqNkOM8Xy")
    for row in real_list.rows:  # opaque: neither the key nor made of it
        assert "!" + row.filename not in row.export_id and row.filename not in row.export_id


def test_real_list_online_first_is_the_rows_marktip(real_list, real_list_raw):
    rows = re.findall(rb"<tr><td class=\"seq\">.*?</tr>", real_list_raw, re.S)
    marked = [
        "1" if b'<b class="marktip">\xe7\xbd\x91\xe7\xbb\x9c\xe9\xa6\x96\xe5\x8f\x91' in r else ""
        for r in rows
    ]
    assert marked.count("1") == 10
    assert [r.online_first for r in real_list.rows] == marked
    # on this page exactly the CAPJ rows (网络首发 journals) carry the mark
    assert {r.dbname for r in real_list.rows if r.online_first} == {"CAPJ"}


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        ('<td class="quote"></td>', "0"),
        ('<td class="quote"> 12 </td>', "12"),
        ('<td class="quote"><a href="javascript:void(0)">1,204</a></td>', "1204"),
        ('<td class="quote">-</td>', ""),  # not a number: unknown, never a guessed 0
        ("", ""),  # no cell at all (patent rows): unknown
    ],
)
def test_cited_cell_forms(cell, expected):
    page = load("list_two_rows").body.decode("utf-8")
    page = re.sub(r'<td class="quote">3</td>', cell, page, count=1)
    assert parse_list(page).rows[0].cited == expected


def test_real_list_turn_token_is_the_hidden_input(real_list, real_list_raw):
    token = re.search(rb'id="hidTurnPage" type="hidden" value="([^"]+)"', real_list_raw)
    assert real_list.turn_token == token.group(1).decode() != ""


def test_real_list_titles_are_non_empty(real_list):
    assert all(row.title for row in real_list.rows)


def test_real_list_title_keeps_highlighted_words_and_drops_markers(real_list):
    """Row 3's title holds a <font> highlight; the 网络首发 marker after the link is not title."""
    assert real_list.rows[2].title == "退火诱导的 WAAM TC17 合金微观结构演变与残余应力(英文)"
    assert real_list.rows[0].title == "Al-Mg合金电弧-搅拌摩擦加工复合增材制造组织性能研究"


def test_real_list_urls_are_kcms2_detail_links(real_list):
    assert all(
        row.url.startswith("https://kns.cnki.net/kcms2/article/abstract?v=")
        for row in real_list.rows
    )


def test_real_list_row_cells(real_list):
    row = real_list.rows[0]
    assert (row.seq, row.source, row.date, row.database, row.quote, row.download) == (
        "1",
        "焊接学报",
        "2026-06-24 09:14",
        "期刊",
        "",
        "37",
    )


def test_real_list_authors_are_joined_in_page_order(real_list):
    assert (
        real_list.rows[0].authors
        == "刘莉;冯宇晨;吴慧琦;徐望辉;何艳兵;Shcheretskiy Volodymyr;董春林"
    )


def test_real_list_seq_numbers_run_one_to_twenty(real_list):
    assert [row.seq for row in real_list.rows] == [str(i) for i in range(1, 21)]


def test_list_parses_text_and_bytes_alike(real_list_raw, real_list):
    assert parse_list(real_list_raw.decode("utf-8")) == real_list


# -- other real pages: never an empty result for a page that is not one ---------------------


def test_old_kns_zero_result_page_is_zero():
    """Decision: the old KNS page says 找到 0 条结果 in its pager, an explicit zero, so it is one."""
    page = parse_list(real_page("old_zero_results.html"))
    assert (page.total, page.page_count, page.rows) == (0, 0, [])


def test_old_kns_zero_page_without_its_count_is_refused():
    """The same page with the pager's count removed says nothing: refused, not zero."""
    raw = real_page("old_zero_results.html").replace("找到&nbsp;0&nbsp;条结果".encode(), b"")
    with pytest.raises(RefusedPage) as info:
        parse_list(raw)
    assert info.value.reason == "no-pager"


def test_kns8_grid_with_a_total_but_no_rows_is_refused():
    """Decision: a header-only grid whose pager says 11 results is broken, not empty."""
    with pytest.raises(RefusedPage) as info:
        parse_list(real_page("kns8_grid_fragment.html"))
    assert info.value.reason == "unexpected"


@pytest.mark.parametrize("name", ["old_patent_list_p3.html", "old_journal_list_p3.html"])
def test_old_kns_list_with_rows_in_old_markup_is_refused(name):
    """Rows the parser cannot read must not come back as an empty page."""
    with pytest.raises(RefusedPage):
        parse_list(real_page(name))


def test_home_page_is_not_a_list():
    with pytest.raises(RefusedPage) as info:
        parse_list(real_page("kns8s_defaultresult_index.html"))
    assert info.value.reason == "no-pager"


# -- hand-made fixtures ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "key"),
    [(c, k) for c in DETAIL_CASES for k in c.expected["fields"]],
    ids=lambda v: str(v),
)
def test_detail_field(case, key):
    assert parse_case(case)[key] == case.expected["fields"][key]


@pytest.mark.parametrize("case", DETAIL_CASES, ids=str)
def test_detail_keys_are_the_items_detail_fields(case):
    doc_type = case.expected["doc_type"]
    expected_keys = [f for f in FIELDS[doc_type] if f not in LIST_FIELDS]
    assert list(parse_case(case)) == expected_keys == list(case.expected["fields"])


def _list_expectations():
    for case in LIST_CASES:
        expected = case.expected["list"]
        for key in ("total", "page_count", "page", "turn_token"):
            yield case, key, expected[key]
        yield case, "len(rows)", len(expected["rows"])
        for i, row in enumerate(expected["rows"]):
            for key in ROW_FIELDS:
                yield case, f"rows[{i}].{key}", row[key]


def _list_value(page, key):
    if key == "len(rows)":
        return len(page.rows)
    if key.startswith("rows["):
        index, _, name = key[5:].partition("].")
        return getattr(page.rows[int(index)], name)
    return getattr(page, key)


@pytest.mark.parametrize(("case", "key", "value"), list(_list_expectations()), ids=str)
def test_list_field(case, key, value):
    assert _list_value(parse_case(case), key) == value


@pytest.mark.parametrize("case", REFUSED_CASES, ids=str)
def test_parser_refuses_refusal_page(case):
    """The parser raises the reason the body alone shows (status and URL are not its input)."""
    with pytest.raises(RefusedPage) as info:
        parse_case(case)
    assert info.value.reason == case.expected["parser_refusal"]


# -- behaviours the fixtures do not isolate -------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "label"),
    [
        (" 申请（专利）号：", "申请(专利)号"),
        ("申请日:", "申请日"),
        ("  地 址 ：", "地址"),
        ("doi：", "DOI"),
    ],
)
def test_normalize_label(raw, label):
    assert normalize_label(raw) == label


def test_no_content_block_with_retry_text_is_not_zero():
    """Decision: 请稍后重试 means "try later" wherever it appears, even in a no-content block."""
    body = '<div id="briefBox"><p class="no-content">抱歉，暂无数据，请稍后重试</p></div>'
    with pytest.raises(RefusedPage) as info:
        parse_list(body)
    assert info.value.reason == "no-data-retry"


def test_no_content_marker_without_its_text_is_not_zero():
    """An empty p.no-content (no 暂无数据) is not a well-formed zero page."""
    with pytest.raises(RefusedPage):
        parse_list(
            '<div id="briefBox"><p class="no-content"></p><div class="x">'
            + "x" * 80
            + "</div></div>"
        )


def _grid(rows_html: str, pager: str = "") -> str:
    return (
        f'<div id="briefBox">{pager}<table class="result-table-list"><tbody>{rows_html}'
        "</tbody></table></div>"
    )


_ROW = (
    '<tr><td class="seq">1</td><td class="name"><a class="fz14" href="/kcms2/article/abstract?v=t">'
    'T</a></td><td class="operat"><a class="icon-collect" data-dbname="CJFQ" data-filename="F1">'
    "</a></td></tr>"
)
_PAGER_TOTAL = '<span class="pagerTitleCell">共找到<em>{}</em>条结果</span>'


def test_pager_saying_zero_with_rows_is_refused():
    with pytest.raises(RefusedPage) as info:
        parse_list(_grid(_ROW, _PAGER_TOTAL.format(0)))
    assert info.value.reason == "unexpected"


def test_page_count_missing_with_a_next_link_is_refused():
    body = _grid(_ROW, _PAGER_TOTAL.format(120)) + '<a id="PageNext" data-curpage="2">下一页</a>'
    with pytest.raises(RefusedPage) as info:
        parse_list(body)
    assert info.value.reason == "no-pager"


def test_page_count_missing_without_a_next_link_is_the_current_page():
    """A single page of results may come without its page mark: then it is the last page."""
    assert parse_list(_grid(_ROW, _PAGER_TOTAL.format(1))).page_count == 1


def test_total_falls_back_to_the_hidden_total_input():
    body = _grid(_ROW, '<span class="pagerTitleCell">共找到条结果</span>') + (
        '<input id="totalCnt" type="hidden" value="1,234">'
        '<span class="countPageMark" data-pagenum="25">1/25</span>'
    )
    assert parse_list(body).total == 1234


def _refusal(body, doc_type=None) -> RefusedPage:
    with pytest.raises(RefusedPage) as info:
        parse_list(body, doc_type)
    return info.value


def test_row_without_any_key_makes_the_page_unexpected_naming_page_and_row():
    """Old mistake: a keyless row got the empty key "/" and the dupefilter kept one of them."""
    row = _ROW.replace('data-dbname="CJFQ" data-filename="F1"', "")
    error = _refusal(_grid(_ROW + row, _PAGER_TOTAL.format(2)))
    assert error.reason == "unexpected"
    assert "list page 1, row 2" in str(error) and "no key" in str(error)


def test_key_from_the_detail_links_own_parameters_when_icon_collect_is_absent():
    row = _ROW.replace('data-dbname="CJFQ" data-filename="F1"', "").replace(
        "abstract?v=t",
        "abstract?v=t&amp;uniplatform=NZKPT&amp;dbcode=CJFD&amp;dbname=CAPJ&amp;filename=F9",
    )
    page = parse_list(_grid(row, _PAGER_TOTAL.format(1)))
    assert (page.rows[0].dbname, page.rows[0].filename) == ("CAPJ", "F9")


def test_icon_collect_wins_over_the_link_parameters():
    row = _ROW.replace("abstract?v=t", "abstract?v=t&amp;dbname=XXXX&amp;filename=OTHER")
    page = parse_list(_grid(row, _PAGER_TOTAL.format(1)))
    assert (page.rows[0].dbname, page.rows[0].filename) == ("CJFQ", "F1")


def test_row_without_a_detail_link_makes_the_page_unexpected():
    """Old mistake: such a row raised ValueError later and the page's other rows were lost."""
    row = '<tr><td class="seq">2</td><td class="name">T2</td><td class="operat"></td></tr>'
    error = _refusal(_grid(_ROW + row, _PAGER_TOTAL.format(2)), "paper")
    assert error.reason == "unexpected" and "paper list page 1, row 2" in str(error)


def test_a_header_row_in_td_cells_is_skipped():
    header = (
        "<tr><td>序号</td><td>题名</td><td>作者</td><td>来源</td><td>发表时间</td><td></td></tr>"
    )
    page = parse_list(_grid(header + _ROW, _PAGER_TOTAL.format(1)))
    assert [r.filename for r in page.rows] == ["F1"]


def test_a_header_only_page_under_a_total_is_unexpected():
    header = "<tr><td>序号</td><td>题名</td><td>发明人</td></tr>"
    assert _refusal(_grid(header, _PAGER_TOTAL.format(3))).reason == "unexpected"


_PATENT_ROW = (
    '<tr><td class="seq">1</td><td class="name"><a class="fz14" href="/kcms2/article/abstract?v=p">'
    'P</a></td><td class="inventor"><a class="KnowledgeNetLink">甲</a>;<a class="KnowledgeNetLink">乙</a>'
    '</td><td class="applicant">某大学</td><td class="date">2023-05-06</td>'
    '<td class="date">2024-03-01</td><td class="data">中国专利</td><td class="operat">'
    '<a class="icon-collect" data-dbname="SCPD" data-filename="CN1A"></a></td></tr>'
)


def test_patent_row_dates_are_application_then_publication():
    """Old mistake: the first td.date (申请日) became the document's date; a round is a day of 公开日."""
    row = parse_list(_grid(_PATENT_ROW, _PAGER_TOTAL.format(1)), "patent").rows[0]
    assert (row.date, row.application_date, row.authors, row.source) == (
        "2024-03-01",
        "2023-05-06",
        "甲;乙",
        "某大学",
    )


def test_a_patent_row_in_journal_markup_is_refused_for_a_patent_search():
    """One td.date cannot be told apart as 申请日 or 公开日: loud, never a guess."""
    error = _refusal(_grid(_ROW, _PAGER_TOTAL.format(1)), "patent")
    assert error.reason == "unexpected" and "journal markup" in str(error)


def test_journal_rows_are_read_for_papers_and_achievements():
    for doc_type in ("paper", "achievement", None):
        assert parse_list(_grid(_ROW, _PAGER_TOTAL.format(1)), doc_type).rows[0].filename == "F1"


def test_a_patent_row_with_one_date_is_unexpected():
    row = _PATENT_ROW.replace('<td class="date">2023-05-06</td>', "")
    assert "1 td.date" in str(_refusal(_grid(row, _PAGER_TOTAL.format(1)), "patent"))


def test_a_patent_date_cell_without_a_date_is_unexpected():
    row = _PATENT_ROW.replace("2024-03-01", "明天")
    assert "公开日" in str(_refusal(_grid(row, _PAGER_TOTAL.format(1)), "patent"))


@pytest.mark.parametrize(
    ("total", "words"),
    [("-5", "negative total"), ("10000000000000000000000", "absurd total"), ("−5", "negative")],
)
def test_negative_or_absurd_totals_are_unexpected(total, words):
    """Old mistake: -5 was read as 5 and 10^22 trusted."""
    error = _refusal(_grid(_ROW, _PAGER_TOTAL.format(total)))
    assert error.reason == "unexpected" and words in str(error)


def test_negative_hidden_total_is_unexpected():
    body = _grid(_ROW) + '<input id="totalCnt" type="hidden" value="-5">'
    assert "negative total" in str(_refusal(body))


def test_negative_page_count_is_unexpected():
    body = (
        _grid(_ROW, _PAGER_TOTAL.format(5))
        + '<span class="countPageMark" data-pagenum="-3">1/-3</span>'
    )
    assert "negative page count" in str(_refusal(body))


def test_a_pager_claiming_a_million_pages_is_read_as_written():
    """The parser reports it; the spider caps the walk (RoundSpider.last_page)."""
    body = _grid(_ROW, _PAGER_TOTAL.format(232)) + (
        '<span class="countPageMark" data-pagenum="1000000">1/1000000</span>'
    )
    assert (parse_list(body).total, parse_list(body).page_count) == (232, 1_000_000)


def test_full_abstract_wins_over_a_cut_visible_one():
    case = load("patent_2026")
    visible = parse_patent(case.body.replace(b'id="abstract_text"', b'id="other"'))["abstract"]
    assert visible.endswith("…") and len(visible) == 101
    assert parse_patent(case.body)["abstract"] == case.expected["fields"]["abstract"]


def test_old_claim_text_is_still_read():
    body = load("patent_2026").body.replace(
        b'<div class="claim"><h5>', b'<div class="claim-text"><h5 style="display:none">'
    )
    assert parse_patent(body)["claim"] == load("patent_2026").expected["fields"]["claim"]


def test_detail_title_without_text_is_refused():
    with pytest.raises(RefusedPage) as info:
        parse_patent(
            '<div class="wx-tit"><h1><span style="display:none">x</span></h1></div>' + "x" * 80
        )
    assert info.value.reason == "unexpected"


def test_repeated_label_keeps_the_first_value():
    body = (
        '<div class="wx-tit"><h1>T</h1></div>'
        '<div class="row"><span class="rowtit">专利类型：</span><p class="funds">发明公开</p></div>'
        '<div class="row"><span class="rowtit">专利类型：</span><p class="funds">外观设计</p></div>'
    )
    assert parse_patent(body)["patent_type"] == "发明公开"


def test_value_written_after_the_label_without_an_element():
    body = '<div class="wx-tit"><h1>T</h1></div><div class="row"><span class="rowtit">页数：</span> 12 </div>'
    assert parse_patent(body)["pages"] == "12"


def test_gbk_bytes_are_decoded_by_their_meta_charset():
    case = load("patent_sparse")
    gbk = case.body.decode("utf-8").replace('charset="utf-8"', 'charset="gbk"').encode("gbk")
    assert parse_patent(gbk) == parse_patent(case.body)


def test_text_input_ignores_a_stale_meta_charset():
    """A str is already decoded: its <meta charset=gbk> must not make it be decoded again."""
    case = load("patent_sparse")
    text = case.body.decode("utf-8").replace('charset="utf-8"', 'charset="gbk"')
    assert parse_patent(text) == parse_patent(case.body)


def test_unknown_doc_type_is_an_error():
    with pytest.raises(ValueError):
        parse_detail("standard", "<html></html>")


def test_detail_fields_table_matches_items():
    assert {t: list(f) for t, f in DETAIL_FIELDS.items()} == {
        t: [f for f in fields if f not in LIST_FIELDS] for t, fields in FIELDS.items()
    }


# -- the old KCMS detail pages (fallback for papers) ----------------------------------------


@pytest.fixture(scope="module")
def old_journal():
    return parse_paper(real_page("old_journal_detail.html"))


def test_old_journal_title_and_doi(old_journal):
    assert (old_journal["title"], old_journal["doi"]) == (
        "荨麻疹证治",
        "10.13288/j.11-2166/r.1987.12.002",
    )


def test_old_journal_authors(old_journal):
    assert old_journal["authors"] == "朱仁康;周鸣岐;任继学;何任;宋祚民;奚凤霖;李寿山;刘学勤;张宇庆"


def test_old_journal_institutions(old_journal):
    assert old_journal["institutions"].split(";")[:2] == [
        "中国中医研究院广安门医院",
        "大连市第三人民医院",
    ]


def test_old_journal_abstract_drops_the_hidden_more_links(old_journal):
    assert old_journal["abstract"].startswith("<正> 朱仁康")
    assert old_journal["abstract"].endswith("证见疹发大片")


def test_old_thesis_fields():
    page = parse_paper(real_page("old_thesis_detail.html"))
    assert (page["title"], page["authors"], page["institutions"], page["clc"], page["doi"]) == (
        "中国科学技术奖励制度研究",
        "姚昆仑",
        "中国科学技术大学",
        "N01;N092",
        "",
    )


def test_old_markup_is_not_read_as_a_patent():
    with pytest.raises(RefusedPage) as info:
        parse_patent(real_page("old_journal_detail.html"))
    assert info.value.reason == "unexpected"


def test_real_journal_list_read_as_a_patent_search_is_unexpected(real_list_raw):
    """Journal rows have one td.date: a patent search must never guess which date it is."""
    with pytest.raises(RefusedPage) as info:
        parse_list(real_list_raw, "patent")
    assert info.value.reason == "unexpected" and "patent list page 1, row 1" in str(info.value)


@pytest.mark.parametrize("doc_type", ["paper", "achievement"])
def test_real_journal_list_is_read_alike_for_papers_and_achievements(
    real_list_raw, real_list, doc_type
):
    assert parse_list(real_list_raw, doc_type) == real_list


def test_a_missing_real_page_skips_in_a_bare_clone_and_fails_in_ci(tmp_path, monkeypatch):
    import tests.fixtures.pages as pages

    monkeypatch.setattr(pages, "REAL_PAGES", tmp_path / "no-shared")
    monkeypatch.delenv(pages.REQUIRE_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="real CNKI pages not available"):
        pages.real_page("kns8s_list_crossdb_p1.html")
    monkeypatch.setenv(pages.REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match="CNKI_TEST_REQUIRE_REAL_PAGES=1 requires them"):
        pages.real_page("kns8s_list_crossdb_p1.html")


# -- issue 26: the source line, ISSN, affiliations, theses --------------------------------------


def test_old_journal_source_line_issn_and_pages(old_journal):
    """div.sourinfo "1987年12期" and "ISSN：1001-1668", div.total 页码 7-10 (the real page)."""
    got = {k: old_journal[k] for k in ("year", "volume", "issue", "page_range", "issn")}
    assert got == {
        "year": "1987",
        "volume": "",
        "issue": "12",
        "page_range": "7-10",
        "issn": "1001-1668",
    }


def test_old_journal_affiliations_are_not_guessed(old_journal):
    """Nine authors, nine institutions, no <sup>: which belongs to whom is unknown."""
    import json

    got = json.loads(old_journal["author_affiliations"])
    assert [a["author"] for a in got] == old_journal["authors"].split(";")
    assert all(a["institutions"] == [] for a in got)


def test_old_thesis_supervisor_and_affiliation():
    import json

    page = parse_paper(real_page("old_thesis_detail.html"))
    assert page["supervisor"] == "张秉伦;胡化凯"
    assert json.loads(page["author_affiliations"]) == [
        {"author": "姚昆仑", "institutions": ["中国科学技术大学"]}
    ]
    assert (page["year"], page["issn"], page["page_range"]) == ("", "", "")


@pytest.mark.parametrize(
    ("tip", "expected"),
    [
        ("焊接学报. 2020,41(04):157-165", ("2020", "41", "4", "157-165")),
        ("科学通报. 2012,57(34):3219-3227", ("2012", "57", "34", "3219-3227")),
        ("应用生态学报. 2009,(06):889-892", ("2009", "", "6", "889-892")),  # no volume
        ("中国有色金属学报. 2026,36(02)", ("2026", "36", "2", "")),  # no pages yet
        ("计算机工程. 2021,47(3):1-7,12", ("2021", "47", "3", "1-7,12")),  # pages in pieces
        ("焊接学报", ("", "", "", "")),  # 网络首发: the journal only
    ],
)
def test_top_tip_forms(tip, expected):
    """The .top-tip forms l0o0/translators_CN CNKI.js reads (hand-made page around them)."""
    page = load("paper_journal").body.decode("utf-8")
    page = re.sub(
        r'<div class="top-tip">.*?</div>', f'<div class="top-tip"><span>{tip}</span></div>', page
    )
    got = parse_paper(page)
    assert (got["year"], got["volume"], got["issue"], got["page_range"]) == expected


def test_pages_from_total_inform_when_the_source_line_has_none():
    page = load("paper_journal").body.decode("utf-8")
    page = page.replace(
        "</body>",
        '<div class="total-inform"><span>页码：7-10</span><span>页数：4</span><span>x</span></div></body>',
    )
    assert parse_paper(page)["page_range"] == "7-10"


def test_affiliations_follow_the_sup_numbers():
    import json

    got = json.loads(parse_paper(load("paper_journal").body)["author_affiliations"])
    assert got == [
        {"author": "张三", "institutions": ["华中科技大学材料科学与工程学院"]},
        {
            "author": "李四",
            "institutions": [
                "华中科技大学材料科学与工程学院",
                "武汉理工大学材料复合新技术国家重点实验室",
            ],
        },
        {"author": "Wang Wu", "institutions": ["武汉理工大学材料复合新技术国家重点实验室"]},
    ]


def test_online_first_from_the_pages_icon_shoufa():
    page = load("paper_journal").body.decode("utf-8")
    assert parse_paper(page)["online_first"] == ""
    marked = page.replace(
        "</body>", '<span class="head-time"><i class="icon-shoufa"></i>2026-06-24</span></body>'
    )
    assert parse_paper(marked)["online_first"] == "1"


@pytest.mark.parametrize(
    ("dbname", "degree"), [("CDFD202301", "博士"), ("CMFD202401", "硕士"), ("CJFQ", "")]
)
def test_thesis_degree_from_the_pages_database(dbname, degree):
    page = load("paper_thesis").body.decode("utf-8")
    page = re.sub(
        r'id="paramdbname" type="hidden" value="[^"]*"',
        f'id="paramdbname" type="hidden" value="{dbname}"',
        page,
    )
    page = re.sub(
        r'id="paramdbcode" type="hidden" value="[^"]*"',
        'id="paramdbcode" type="hidden" value=""',
        page,
    )
    assert parse_paper(page)["degree"] == degree


def test_patent_numbers_and_dates_are_kept_apart_as_labelled():
    got = parse_patent(load("patent_full").body)
    assert got["publication_no"] and got["grant_no"] and got["publication_no"] != got["grant_no"]
    assert got["publication_date"] != got["grant_date"]
