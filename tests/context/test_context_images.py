"""Image attachments: sniffed types, clear errors, identical bytes on replay."""

from __future__ import annotations

import base64
import struct
import zlib
from pathlib import Path

import pytest

from hippobot.context import images
from hippobot.context.images import load_image_block, user_content
from hippobot.errors import UserError


def png_bytes(width: int = 2, height: int = 2) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def test_png_becomes_a_data_url_block(tmp_path):
    data = png_bytes()
    path = tmp_path / "red.png"
    path.write_bytes(data)
    block = load_image_block(path)
    assert block["type"] == "image_url"
    assert block["image_url"]["url"] == "data:image/png;base64," + base64.b64encode(data).decode()


def test_type_comes_from_bytes_not_extension(tmp_path):
    path = tmp_path / "photo.dat"
    path.write_bytes(b"\xff\xd8\xff\xe0" + b"\x00" * 32)
    assert load_image_block(path)["image_url"]["url"].startswith("data:image/jpeg;base64,")
    webp = tmp_path / "anim"
    webp.write_bytes(b"RIFF\x10\x00\x00\x00WEBPVP8 " + b"\x00" * 8)
    assert load_image_block(webp)["image_url"]["url"].startswith("data:image/webp;base64,")


def test_text_file_named_png_is_refused(tmp_path):
    path = tmp_path / "notes.png"
    path.write_text("just some notes", encoding="utf-8")
    with pytest.raises(UserError, match=r"not an image: .*notes\.png \(supported: png, jpeg, gif, webp\)"):
        load_image_block(path)


def test_missing_image_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match=r"image not found: .*gone\.png"):
        load_image_block(tmp_path / "gone.png")


def test_oversized_image_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(images, "MAX_IMAGE_BYTES", 100)
    path = tmp_path / "big.png"
    path.write_bytes(png_bytes() + b"\x00" * 500)
    with pytest.raises(UserError, match="image too large"):
        load_image_block(path)


def test_replay_is_byte_identical_and_served_from_cache(tmp_path, monkeypatch):
    path = tmp_path / "red.png"
    path.write_bytes(png_bytes())
    first = load_image_block(path)
    reads = []
    original = Path.read_bytes

    def counting(self):
        reads.append(self)
        return original(self)

    monkeypatch.setattr(Path, "read_bytes", counting)
    second = load_image_block(path)
    assert second == first and second is not first
    assert reads == []


def test_user_content_puts_images_first_then_text(tmp_path):
    path = tmp_path / "red.png"
    path.write_bytes(png_bytes())
    assert user_content("hello", []) == "hello"
    content = user_content("what is this?", [str(path)])
    assert isinstance(content, list)
    assert [b["type"] for b in content] == ["image_url", "text"]
    assert content[1]["text"] == "what is this?"
