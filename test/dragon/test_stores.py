"""Robot memory and cloud document store: BM25 retrieval of the obviously relevant document,
persistence across restarts, chunking, and the guards on what can be stored."""

import json

import pytest

from edge_spec_ros.dragon.stores import MEMORY_FILE, DocumentStore, Retrieved, RobotMemory

OBSERVATIONS = [
    ("observation", "a red chair next to the kitchen door", (1.2, 3.4, 0.5), 10.0),
    ("observation", "a silver bottle on the table in the living room", (4.0, -1.0, 1.57), 20.0),
    ("instruction", "go to the charging dock", (0.0, 0.0, 0.0), 30.0),
    ("note", "the owner's cat sleeps under the stairs in the afternoon", (0.0, 0.0, 0.0), 40.0),
    ("observation", "the front door is closed", (-2.0, 5.0, 3.14), 50.0),
]


def _filled(directory=None) -> RobotMemory:
    memory = RobotMemory(directory)
    for kind, text, pose, time in OBSERVATIONS:
        memory.add(kind, text, pose=pose, time=time)
    return memory


def test_memory_retrieves_the_obviously_relevant_entry():
    """"where did you see the red chair?" finds the red-chair observation first, with its pose."""
    memory = _filled()
    hits = memory.top_k("where did you see the red chair?", k=3)
    assert hits and isinstance(hits[0], Retrieved)
    assert hits[0].doc_id == "mem-0"
    assert "red chair" in hits[0].text and "x=1.20" in hits[0].text and "y=3.40" in hits[0].text
    assert hits[0].score > 0 and all(a.score >= b.score for a, b in zip(hits, hits[1:]))
    assert memory.top_k("where is the cat sleeping", k=1)[0].doc_id == "mem-3"
    assert memory.top_k("silver bottle", k=1)[0].doc_id == "mem-1"


def test_memory_top_k_bounds_and_no_match():
    """k bounds the hits; a query with no word in common (or only stop words) returns nothing."""
    memory = _filled()
    assert len(memory.top_k("door", k=1)) == 1
    assert {h.doc_id for h in memory.top_k("door", k=5)} == {"mem-0", "mem-4"}
    assert memory.top_k("zebra quantum", k=3) == []
    assert memory.top_k("the of and", k=3) == []
    assert memory.top_k("door", k=0) == []
    assert RobotMemory().top_k("door", k=3) == []


def test_memory_persists_and_reloads_across_restarts(tmp_path):
    """Entries written by one process come back, identical and searchable, in the next; new entries
    continue the ids."""
    first = _filled(tmp_path)
    del first
    second = RobotMemory(tmp_path)
    assert len(second) == len(OBSERVATIONS)
    assert [(e.kind, e.text, (e.x, e.y, e.theta), e.time) for e in second.entries] == OBSERVATIONS
    assert second.top_k("red chair", k=1)[0].doc_id == "mem-0"
    entry = second.add("note", "the blue ball is in the garden", pose=(7.0, 7.0, 0.0), time=60.0)
    assert entry.doc_id == "mem-5"
    third = RobotMemory(tmp_path)
    assert third.top_k("blue ball", k=1)[0].doc_id == "mem-5"
    assert len((tmp_path / MEMORY_FILE).read_text().splitlines()) == len(OBSERVATIONS) + 1


def test_memory_skips_a_torn_last_line(tmp_path):
    """A crash mid-write leaves a partial line; the memory still loads everything before it."""
    _filled(tmp_path)
    with (tmp_path / MEMORY_FILE).open("a") as f:
        f.write('{"entry_id": 5, "kind": "note", "te')
    memory = RobotMemory(tmp_path)
    assert len(memory) == len(OBSERVATIONS) and memory.skipped_lines == 1


def test_memory_rejects_bad_entries(tmp_path):
    memory = RobotMemory(tmp_path)
    with pytest.raises(ValueError):
        memory.add("rumour", "something", time=0.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        memory.add("note", "   ", time=0.0)
    with pytest.raises(ValueError):
        memory.add("note", "x marks", pose=(float("nan"), 0.0, 0.0), time=0.0)
    assert len(memory) == 0
    path = tmp_path / MEMORY_FILE
    assert not path.exists() or path.read_text() == ""  # nothing half-valid was written


def test_memory_file_is_plain_json_lines(tmp_path):
    _filled(tmp_path)
    rows = [json.loads(line) for line in (tmp_path / MEMORY_FILE).read_text().splitlines()]
    assert rows[0] == {"entry_id": 0, "kind": "observation", "text": OBSERVATIONS[0][1], "x": 1.2, "y": 3.4,
                       "theta": 0.5, "time": 10.0}


def test_memory_scores_rescore_fixed_documents():
    """scores(query, ids) gives R(d, q) for chosen documents in the order asked (dynamic weights)."""
    memory = _filled()
    s = memory.scores("red chair kitchen", ["mem-1", "mem-0"])
    assert s.shape == (2,) and s[1] > 0 and s[0] == 0


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "animals").mkdir()
    (tmp_path / "animals" / "cats.txt").write_text(
        "Cats sleep for twelve to sixteen hours a day.\n\nA cat purrs when it is content.\n")
    (tmp_path / "furniture.md").write_text(
        "# Furniture\n\nA chair is a seat for one person, usually with four legs and a back.\n\n"
        "A sofa seats several people.\n")
    (tmp_path / "robots.txt").write_text("Legged robots such as the Unitree Go2 walk on four legs.\n")
    (tmp_path / "ignored.bin").write_bytes(b"\x00\x01 chair chair chair")
    return tmp_path


def test_document_store_retrieves_the_obviously_relevant_paragraph(folder):
    store = DocumentStore(folder)
    assert set(store.doc_ids) == {"animals/cats.txt#0", "animals/cats.txt#1", "furniture.md#0",
                                  "furniture.md#1", "furniture.md#2", "robots.txt#0"}
    hit = store.top_k("what is a chair?", k=2)[0]
    assert hit.doc_id == "furniture.md#1" and "seat for one person" in hit.text
    assert store.top_k("how long do cats sleep", k=1)[0].doc_id == "animals/cats.txt#0"
    assert store.top_k("legged robot go2", k=1)[0].doc_id == "robots.txt#0"
    assert store.top_k("photosynthesis", k=3) == []


def test_document_store_file_chunking(folder):
    store = DocumentStore(folder, chunking="file")
    assert set(store.doc_ids) == {"animals/cats.txt", "furniture.md", "robots.txt"}
    assert store.top_k("purrs", k=1)[0].doc_id == "animals/cats.txt"


def test_document_store_missing_folder(tmp_path):
    with pytest.raises(FileNotFoundError):
        DocumentStore(tmp_path / "nope")


def _line(entry_id, text, time=0.0) -> str:
    return json.dumps({"entry_id": entry_id, "kind": "note", "text": text, "x": 0.0, "y": 0.0, "theta": 0.0,
                       "time": time}) + "\n"


def test_memory_keeps_both_entries_of_a_repeated_id(tmp_path, caplog):
    """A hand-written memory.jsonl that repeats an id: nothing is lost; the later line is kept under a fresh
    id (above every id in the file), logged with the file, the line and both ids, and listed."""
    (tmp_path / MEMORY_FILE).write_text(_line(0, "the charger is behind the sofa") + _line(4, "the keys hang by the door")
                                        + _line(0, "the umbrella is in the hall closet")
                                        + _line(4, "the cat food is in the pantry"))
    with caplog.at_level("WARNING", logger="edge_spec_ros.dragon.stores"):
        memory = RobotMemory(tmp_path)
    assert len(memory) == 4 and memory.skipped_lines == 0
    assert [e.entry_id for e in memory.entries] == [0, 4, 5, 6]
    assert [(r.line, r.entry_id, r.new_id, r.first_line) for r in memory.renumbered] == [(3, 0, 5, 1), (4, 4, 6, 2)]
    assert memory.top_k("where is the umbrella", k=1)[0].text.endswith("the umbrella is in the hall closet")
    assert memory.top_k("where is the charger", k=1)[0].text.endswith("the charger is behind the sofa")
    assert memory.top_k("cat food", k=1)[0].doc_id == "mem-6"
    warned = [r.getMessage() for r in caplog.records]
    assert any(str(tmp_path / MEMORY_FILE) in m and "line 3" in m and "entry id 0" in m and "entry 5" in m
               for m in warned), warned
    # a new entry gets an id above all of them, and the file reloads the same way
    assert memory.add("note", "the remote is on the shelf", time=1.0).entry_id == 7
    again = RobotMemory(tmp_path)
    assert len(again) == 5 and len({e.doc_id for e in again.entries}) == 5
    assert again.top_k("where is the remote", k=1)[0].doc_id == "mem-7"


def test_memory_new_ids_stay_above_ids_written_out_of_order(tmp_path):
    """Ids written by hand out of order: a new entry takes the largest id + 1, never one already used."""
    (tmp_path / MEMORY_FILE).write_text(_line(3, "a lamp in the corner") + _line(0, "a plant by the window"))
    memory = RobotMemory(tmp_path)
    assert [memory.add("note", f"note {i}", time=float(i)).entry_id for i in range(3)] == [4, 5, 6]
    assert not memory.renumbered and len(RobotMemory(tmp_path)) == 5


def test_memory_skips_lines_with_a_bad_id(tmp_path, caplog):
    """An id that is not a non-negative integer ("0" would collide with 0 as mem-0) is an unreadable line:
    counted and logged with its line number."""
    (tmp_path / MEMORY_FILE).write_text(_line(0, "a lamp") + _line("0", "a plant") + _line(-1, "a rug")
                                        + _line(True, "a vase"))
    with caplog.at_level("WARNING", logger="edge_spec_ros.dragon.stores"):
        memory = RobotMemory(tmp_path)
    assert len(memory) == 1 and memory.skipped_lines == 3
    assert sum("not a memory entry" in r.getMessage() for r in caplog.records) == 3
    assert any("line 2" in r.getMessage() for r in caplog.records)


def test_document_store_same_file_name_in_two_folders(tmp_path):
    """Document ids are paths relative to the folder: two files named alike in different sub-folders are
    two documents, both retrievable; a symlinked sub-folder is not read twice."""
    (tmp_path / "kitchen").mkdir()
    (tmp_path / "garage").mkdir()
    (tmp_path / "kitchen" / "notes.txt").write_text("The kettle boils water in two minutes.")
    (tmp_path / "garage" / "notes.txt").write_text("The bicycle pump hangs on the wall.")
    (tmp_path / "again").symlink_to(tmp_path / "kitchen", target_is_directory=True)
    store = DocumentStore(tmp_path)
    assert store.doc_ids == ("garage/notes.txt#0", "kitchen/notes.txt#0")
    assert store.top_k("kettle water", k=1)[0].doc_id == "kitchen/notes.txt#0"
    assert store.top_k("bicycle pump", k=1)[0].doc_id == "garage/notes.txt#0"
    assert DocumentStore(tmp_path, chunking="file").doc_ids == ("garage/notes.txt", "kitchen/notes.txt")
