"""The stand-in's document generation: a patent, paper or achievement made whole from its ref and
the seed (titles, people, organisations, codes, keywords, abstracts, source lines, citation
fields), so that any document can be made again from its filename alone.
"""

from __future__ import annotations

import json
import random
from datetime import date

from standin import vocab
from standin.catalogue import (
    FIELDS,
    FOREIGN_DATABASES,
    Document,
    day_digits,
    iso_day,
    issn_of,
    mix,
)


class Generation:
    """Documents made from their ref (day, leaf index, i) and the seed: every field a correct
    parser extracts, and what the markup needs beyond them. A part of
    :class:`standin.corpus.Corpus`, whose hashes, counts and titles it draws on."""

    def _document(self, doc_type: str, day: int, li: int, i: int) -> Document:
        rnd = random.Random(mix(self.leaf_base(doc_type, day, li), i, 4))
        title, ti, oi, ai = self.title_parts(doc_type, day, li, i)
        _, cites, downloads = self.rank(doc_type, day, li, i)
        words = {"t": vocab.TECHS[ti], "o": vocab.OBJECTS[oi], "a": vocab.ACTIONS[ai]}
        tree = self.trees[doc_type]
        leaf = tree.leaves[li]
        make = {"patent": self._patent, "paper": self._paper, "achievement": self._achievement}[
            doc_type
        ]
        fields, codes, extra = make(rnd, day, li, i, leaf, title, words)
        if i < 0:  # a foreign 总库 row: a paper-like document of another database
            db_index, k = divmod(-1 - i, 10000)
            db, name = list(FOREIGN_DATABASES.values())[db_index]
            fields.update(
                dbname=db,
                filename=f"{db}{day_digits(day)}{li:03d}{k:04d}",
                database=name,
                date=iso_day(day),
            )
            extra["first_online"] = False
        shift = self.options.count_shift if i >= 0 else 0
        extra["cites"] = cites = cites + shift
        extra["downloads"] = downloads = downloads + shift
        base = self.leaf_base(doc_type, day, li)
        if doc_type == "paper":
            # drawn from a generator of their own, so that every older field keeps its value
            self._citation_fields(random.Random(mix(base, i, 13)), day, fields, extra)
        if self.options.dbname_years and i >= 0:
            fields["dbname"] = self._year_dbname(fields["dbname"], day, mix(base, i, 9))
        extra["cookie"] = "".join(f"{mix(base, i, k):016x}" for k in (5, 6, 7))
        # the list row's fields: the opaque export id (input.cbItem) of every type, the counts
        # of papers and achievements (patent rows have none), 网络首发 of papers
        fields["export_id"] = extra["cookie"]
        if doc_type != "patent":
            fields["cited"] = str(cites)
            fields["downloads"] = str(downloads)
            fields["counted_at"] = ""
        if doc_type == "paper":
            fields["online_first"] = "1" if extra.get("first_online") else "0"
        fields = {name: fields.get(name, "") for name in FIELDS[doc_type]}
        return Document(doc_type, (day, li, i), fields, codes, extra)

    def _citation_fields(self, rnd: random.Random, day: int, fields: dict, extra: dict) -> None:
        """A paper's source line, ISSN, affiliations and thesis fields (issue 26), as a correct
        parser stores them: a journal issue of the day's year (网络首发 papers have none yet),
        the journal's ISSN, each author's institutions, a thesis's supervisor and degree."""
        journal = fields["database"] == "期刊"
        year = str(date.fromordinal(day).year)
        cited = {name: "" for name in ("year", "volume", "issue", "page_range", "issn")}
        if journal:
            cited["issn"] = issn_of(self.h("issn", fields["source"]))
            if not extra.get("first_online"):
                first = rnd.randint(1, 300)
                cited.update(
                    year=year,
                    volume=str(int(year) - 1980 + self.h("volume", fields["source"]) % 5),
                    issue=str(rnd.randint(1, 12)),
                    page_range=f"{first}-{first + rnd.randint(2, 15)}",
                )
                # some pages give 页码 in .total-inform instead of the source line
                extra["pages_in_total"] = rnd.random() < 0.2
        institutions = fields["institutions"].split(";") if fields["institutions"] else []
        numbered = len(institutions) > 1
        affiliations = [
            {
                "author": name,
                "institutions": [institutions[k - 1] for k in aff] if numbered else institutions,
            }
            for name, aff in zip(fields["authors"].split(";"), extra["affiliations"], strict=True)
        ]
        thesis = fields["database"] in ("博士", "硕士")
        fields.update(
            cited,
            author_affiliations=json.dumps(affiliations, ensure_ascii=False, separators=(",", ":"))
            if affiliations
            else "",
            supervisor=";".join(self._people(rnd, 1, 2)) if thesis else "",
            degree=fields["database"] if thesis else "",
        )

    @staticmethod
    def _year_dbname(family: str, day: int, draw: int) -> str:
        """A document's database name with its year, in the shapes of CNKI's real pages:
        patents ``SCPD`` + the publication year (``SCPD2017`` on old_patent_list_p3.html);
        journals ``CJFQ`` (kns8s) or ``CJFDLAST2015``/``CJFD2008`` (old_journal_list_p3.html);
        ``CAPJ`` as it is; theses ``CMFD202101``/``CDFD202101``-style; achievements ``SNAD``."""
        year = date.fromordinal(day).year
        u = (draw & 0xFFFF) / 65536.0
        if family == "SCPD":
            return f"SCPD{year}"
        if family == "CJFQ":
            return "CJFQ" if u < 0.34 else f"CJFDLAST{year}" if u < 0.67 else f"CJFD{year}"
        if family in ("CMFD", "CDFD"):
            return f"{family}{year}{1 + (draw >> 16) % 2:02d}"
        return family

    @staticmethod
    def _person(rnd: random.Random) -> str:
        name = rnd.choice(vocab.SURNAMES) + rnd.choice(vocab.GIVEN)
        return name + rnd.choice(vocab.GIVEN) if rnd.random() < 0.7 else name

    def _people(self, rnd: random.Random, lo: int, hi: int) -> list[str]:
        people: list[str] = []
        want = rnd.randint(lo, hi)
        while len(people) < want:
            p = self._person(rnd)
            if p not in people:
                people.append(p)
        return people

    @staticmethod
    def _address(rnd: random.Random, province: int) -> str:
        prov, _code, post, cities = vocab.PROVINCES[province]
        city, district, road = rnd.choice(cities)
        postcode = f"{post}{rnd.randint(0, 99):02d}{rnd.randint(0, 9)}"[:6]
        return f"{postcode} {prov}{city}{district}{road}{rnd.randint(1, 999)}号"

    @staticmethod
    def _organisation(rnd: random.Random) -> tuple[str, int]:
        """A patent applicant or research unit: (name, province index)."""
        u = rnd.random()
        if u < 0.45:
            province = rnd.randrange(len(vocab.PROVINCES))
            prov_name = vocab.PROVINCES[province][0]
            city = vocab.PROVINCES[province][3][0][0] or prov_name
            name = f"{city.removesuffix('市')}{rnd.choice(vocab.FIRM_WORDS)}{rnd.choice(vocab.FIRM_TRADES)}有限公司"
            return name, province
        if u < 0.75:
            name, _code, province = rnd.choice(vocab.UNIVERSITIES)
            return name, province
        return rnd.choice(vocab.INSTITUTES)

    def _code(self, rnd: random.Random, doc_type: str, leaf: str) -> str:
        """A full classification code under ``leaf`` (IPC for patents, CLC otherwise)."""
        tree = self.trees[doc_type]
        for _ in range(8):
            if doc_type == "patent":
                code = leaf
                if len(code) == 1:
                    code += f"{rnd.randint(1, 99):02d}"
                if len(code) == 3:
                    code += rnd.choice("BCDFGHJKLMNPQ")
                code += f"{rnd.randint(1, 99)}/{rnd.choice((0, 2, 4, 6, 8, 10, 12, 14, 16, 20, 24, 32, 40)):02d}"
            else:
                letters = len(leaf) - len(leaf.lstrip("ABCDEFGHIJKLMNOPQRSTUVWXYZ"))
                digits = len(leaf) - letters
                code = leaf + "".join(str(rnd.randint(0, 9)) for _ in range(max(0, 3 - digits)))
                if rnd.random() < 0.7:
                    code += "." + str(rnd.randint(1, 99))
            if tree.owner(code) == leaf:
                return code
        return leaf

    def _codes(self, rnd, doc_type, day, li, i, leaf) -> list[str]:
        tree = self.trees[doc_type]
        codes = [self._code(rnd, doc_type, leaf)]
        for s in self.secondary_leaves(doc_type, day, li, i):
            codes.append(self._code(rnd, doc_type, tree.leaves[s]))
        return codes

    def _keywords(self, rnd, words, leaf_name) -> list[str]:
        pool = [
            words["t"],
            words["o"],
            words["o"] + words["a"],
            leaf_name.split("、")[0].split("；")[0],
        ]
        pool += rnd.sample(vocab.TECHS, 3)
        out: list[str] = []
        for w in pool:
            if w and w not in out:
                out.append(w)
        return out[: rnd.randint(3, 6)]

    def _patent(self, rnd, day, li, i, leaf, title, w):
        tree = self.trees["patent"]
        u = rnd.random()
        kind, patent_type = (
            ("A", "发明公开") if u < 0.55 else ("B", "发明授权") if u < 0.75 else ("U", "实用新型")
        )
        filename = f"CN{day_digits(day)}{li:03d}{i:04d}{kind}"
        applicant, province = self._organisation(rnd)
        co = []
        if rnd.random() < 0.35:
            for _ in range(rnd.randint(1, 2)):
                other, _p = self._organisation(rnd)
                if other != applicant and other not in co:
                    co.append(other)
        inventors = self._people(rnd, 1, 7)
        codes = self._codes(rnd, "patent", day, li, i, leaf)
        app_day = day - rnd.randint(60, 900)
        app_year = date.fromordinal(app_day).year
        application_no = f"CN{app_year}{2 if kind == 'U' else 1}{rnd.randint(0, 9999999):07d}.{rnd.choice('0123456789X')}"
        if kind == "A":
            publication_no, grant_no, grant_date = filename, "", ""
        else:
            grant_no, grant_date = filename, iso_day(day)
            publication_no = (
                f"CN1{rnd.randint(10000000, 19999999)}A"
                if kind == "B" and rnd.random() < 0.7
                else ""
            )
        agency = rnd.choice(vocab.AGENCIES) if rnd.random() < 0.7 else ""
        agent = ";".join(self._people(rnd, 1, 2)) if agency and rnd.random() < 0.85 else ""
        pages = str(rnd.randint(6, 32)) if rnd.random() < 0.8 else ""
        leaf_name = tree.names[leaf]
        sig = rnd.choice(("振动", "图像", "温度", "电流", "声学", "光谱", "压力", "位移"))
        core = title.removeprefix("一种")
        benefit = rnd.choice(vocab.BENEFITS).format(a=w["a"])
        abstract = (
            f"本发明公开了{core}，涉及{leaf_name.split('；')[0]}技术领域。该方法包括：获取{w['o']}的{sig}数据；"
            f"采用{w['t']}对所述{sig}数据进行特征提取，得到特征向量；根据所述特征向量完成{w['o']}的{w['a']}。"
            f"本发明{benefit}，具有结构简单、易于实施的优点。"
        )
        claim = (
            f"1.{title}，其特征在于，包括以下步骤：S1、采集{w['o']}的{sig}数据并进行预处理；"
            f"S2、构建基于{w['t']}的{w['a']}模型，将预处理后的{sig}数据输入所述模型；"
            f"S3、根据所述模型的输出结果完成{w['o']}的{w['a']}。"
        )
        fields = {
            "dbname": "SCPD",
            "filename": filename,
            "title": title,
            "source": applicant,
            "date": iso_day(day),
            "database": "中国专利",
            "patent_type": patent_type,
            "application_no": application_no,
            "application_date": iso_day(app_day),
            "publication_no": publication_no,
            "publication_date": iso_day(day),
            "grant_no": grant_no,
            "grant_date": grant_date,
            "applicant": applicant,
            "address": self._address(rnd, province),
            "co_applicants": ";".join(co),
            "inventors": ";".join(inventors),
            "ipc": ";".join(codes),
            "main_ipc": codes[0],
            "province_code": vocab.PROVINCES[province][1],
            "agency": agency,
            "agent": agent,
            "pages": pages,
            "abstract": abstract,
            "claim": claim,
        }
        # CNKI's irregularities, fixed per document: labels with a leading space, the
        # full-width brackets, optional keys simply missing (the empty fields above).
        extra = {
            "space_date": rnd.random() < 0.15,
            "space_address": rnd.random() < 0.15,
            "fullwidth_no": rnd.random() < 0.3,
            "old_claim": rnd.random() < 0.2,  # the claim as an older page's div.claim-text
            "keyless": rnd.random(),  # under the collect_missing share: no a.icon-collect
        }
        return fields, codes, extra

    def _paper(self, rnd, day, li, i, leaf, title, w):
        tree = self.trees["paper"]
        u = rnd.random()
        dbname = "CJFQ" if u < 0.55 else "CAPJ" if u < 0.70 else "CMFD" if u < 0.92 else "CDFD"
        thesis = dbname in ("CMFD", "CDFD")
        if thesis:
            source, code4, _prov = rnd.choice(vocab.UNIVERSITIES)
            authors = self._people(rnd, 1, 1)
            institutions = [source]
        else:
            source, code4 = rnd.choice(vocab.JOURNALS.get(leaf[0], vocab.JOURNALS["*"]))
            authors = self._people(rnd, 1, 6)
            institutions = []
            for _ in range(rnd.randint(1, 3)):
                if rnd.random() < 0.8:
                    inst = rnd.choice(vocab.UNIVERSITIES)[0] + rnd.choice(vocab.SCHOOLS)
                else:
                    inst = rnd.choice(vocab.INSTITUTES)[0]
                if inst not in institutions:
                    institutions.append(inst)
        # which institutions each author belongs to (the <sup> indexes on the page)
        affiliations = [
            sorted(
                rnd.sample(
                    range(1, len(institutions) + 1), rnd.randint(1, min(2, len(institutions)))
                )
            )
            for _ in authors
        ]
        filename = f"{code4}{day_digits(day)}{li:03d}{i:04d}"
        year = date.fromordinal(day).year
        if thesis:
            doi = (
                f"10.27{rnd.randint(0, 999):03d}/d.cnki.g{code4.lower()}.{year}.{rnd.randint(0, 9999):06d}"
                if rnd.random() < 0.5
                else ""
            )
            funds = (
                [f"{rnd.choice(vocab.FUNDS)}({rnd.randint(61000000, 62399999)})"]
                if rnd.random() < 0.2
                else []
            )
        else:
            doi = (
                f"10.{rnd.randint(1000, 19999)}/j.cnki.{code4.lower()}.{year}.{rnd.randint(1, 24):02d}.{rnd.randint(1, 400):03d}"
                if rnd.random() < 0.75
                else ""
            )
            funds = []
            if rnd.random() < 0.7:
                for _ in range(rnd.randint(1, 2)):
                    fund = f"{rnd.choice(vocab.FUNDS)}({rnd.choice(('6', '7', '2022YFB', '2023YFC'))}{rnd.randint(1000000, 3999999)})"
                    if fund not in funds:
                        funds.append(fund)
        codes = self._codes(rnd, "paper", day, li, i, leaf)
        topics = [tree.names[leaf]]
        sibling = rnd.choice(tree.leaves)
        if rnd.random() < 0.3 and tree.names[sibling] not in topics:
            topics.append(tree.names[sibling])
        problem = rnd.choice(vocab.PROBLEMS)
        metric = rnd.choice(vocab.METRICS)
        abstract = (
            f"针对{w['o']}{w['a']}过程中存在的{problem}等问题，提出了一种基于{w['t']}的{w['o']}{w['a']}方法。"
            f"首先，构建了{w['o']}的多源数据集并完成预处理；其次，利用{w['t']}提取关键特征并建立{w['a']}模型；"
            f"最后，在实测数据上进行了对比实验。实验结果表明，与现有方法相比，所提方法的{metric}提高了"
            f"{rnd.randint(20, 199) / 10:.1f}%，为{w['o']}{w['a']}提供了新的思路。"
        )
        date_text = iso_day(day)
        if dbname == "CAPJ":  # 网络首发 rows carry a time as well, as on the real list page
            date_text += f" {rnd.randint(8, 21):02d}:{rnd.randint(0, 59):02d}"
        leaf_letter = leaf[:2] if leaf[:2] in ("TN", "TP") else leaf[0]
        album = "信息科技" if leaf_letter in ("TN", "TP") else vocab.ALBUMS.get(leaf[0], "基础科学")
        fields = {
            "dbname": dbname,
            "filename": filename,
            "title": title,
            "source": source,
            "date": date_text,
            "database": {"CJFQ": "期刊", "CAPJ": "期刊", "CMFD": "硕士", "CDFD": "博士"}[dbname],
            "authors": ";".join(authors),
            "institutions": ";".join(institutions),
            "abstract": abstract,
            "keywords": ";".join(self._keywords(rnd, w, tree.names[leaf])),
            "fund": ";".join(funds),
            "doi": doi,
            "clc": ";".join(codes),
            "album": album,
            "topic": ";".join(topics),
        }
        extra = {"affiliations": affiliations, "first_online": dbname == "CAPJ"}
        return fields, codes, extra

    def _achievement(self, rnd, day, li, i, leaf, title, w):
        tree = self.trees["achievement"]
        unit, _province = self._organisation(rnd)
        completers = self._people(rnd, 2, 8)
        codes = self._codes(rnd, "achievement", day, li, i, leaf)
        subjects = [
            f"{rnd.choice((120, 413, 460, 510, 520, 530, 570, 580, 610, 620, 790, 810))}.{rnd.randint(10, 99)}"
        ]
        if rnd.random() < 0.3:
            subjects.append(f"{rnd.choice((120, 413, 520, 580, 620))}.{rnd.randint(10, 99)}")
        y1 = date.fromordinal(day).year - rnd.randint(0, 2)
        y0 = y1 - rnd.randint(1, 4)
        period = (
            f"{y0}-{rnd.randint(1, 12):02d}~{y1}-{rnd.randint(1, 12):02d}"
            if rnd.random() < 0.9
            else ""
        )
        summary = (
            f"该成果针对{w['o']}{w['a']}中{rnd.choice(vocab.PROBLEMS)}的难题，系统研究了{w['t']}的关键技术，"
            f"研制了{w['o']}{w['a']}原型系统，形成了{rnd.randint(2, 9)}项核心技术。成果已在"
            f"{rnd.randint(2, 30)}家单位推广应用，累计新增产值{rnd.randint(100, 9000)}万元，经济和社会效益显著。"
        )
        fields = {
            "dbname": "SNAD",
            "filename": f"SNAD{day_digits(day)}{li:03d}{i:04d}",
            "title": title,
            "source": unit,
            "date": iso_day(day),
            "database": "成果",
            "completers": ";".join(completers),
            "first_unit": unit,
            "keywords": ";".join(self._keywords(rnd, w, tree.names[leaf])),
            "clc": ";".join(codes),
            "subject_code": ";".join(subjects),
            "summary": summary,
            "achievement_type": rnd.choice(vocab.ACHIEVEMENT_TYPES),
            "entry_date": iso_day(day),
            "level": rnd.choice(vocab.LEVELS) if rnd.random() < 0.8 else "",
            "period": period,
            "evaluation": rnd.choice(vocab.EVALUATIONS) if rnd.random() < 0.9 else "",
        }
        return fields, codes, {}
