"""A real browser: headless Chromium opens the demo page and captures a recording through the
microphone path (Chromium's fake capture device reads a WAV file), and the committed text is
read off the page.

Set ``SUSURRUS_DEMO_SCREENSHOT=docs/demo.png`` to also save a screenshot of the page (taken
while the recording streams, with committed and interim text).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from server_helpers import stream_text

from susurrus.audio.io import decode_audio
from susurrus.evaluation.metrics import corpus_error_rate

CLIP = "librispeech_test-clean_1089-134686-0001"  # 3.3 s: "stuff it into you his belly counselled him"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


def _chromium(wav, *flags: str):
    """Headless Chromium whose microphone plays ``wav`` (a fake device, permission granted)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--use-fake-ui-for-media-stream",
                 "--use-fake-device-for-media-stream", f"--use-file-for-fake-audio-capture={wav}", *flags):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(DRIVER), options=options)


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"waited {timeout:.0f} s for {what}")
        time.sleep(0.1)


@pytest.mark.skipif(CHROMIUM is None or DRIVER is None,
                    reason="headless Chromium not installed (apt-get install chromium chromium-driver; .ci/run does)")
@pytest.mark.slow
def test_browser_demo_transcribes_the_microphone(server, tiny, dev_item, tmp_path):
    pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    item = dev_item(CLIP)
    audio = decode_audio(item.audio)
    duration = len(audio) / 16000
    # Chromium loops the file: 4 s of silence after the speech, and the test stops inside it
    wav = tmp_path / "mic.wav"
    sf.write(wav, np.concatenate([audio, np.zeros(4 * 16000, np.float32)]), 16000, subtype="PCM_16")

    driver = _chromium(wav, "--window-size=1100,760", "--autoplay-policy=no-user-gesture-required")
    try:
        driver.get(f"{server.http_url}/")
        body = driver.find_element(By.TAG_NAME, "body")
        driver.find_element(By.ID, "start").click()
        _wait(lambda: body.get_attribute("data-state") == "live", 30, "the microphone to start")
        started = time.monotonic()
        screenshot = os.environ.get("SUSURRUS_DEMO_SCREENSHOT")
        if screenshot:  # mid-stream: committed words, a dimmed interim guess, a hovered word's times
            _wait(lambda: len(driver.find_elements(By.CSS_SELECTOR, "#transcript .committed .word")) >= 4
                  and driver.find_element(By.CSS_SELECTOR, "#transcript .interim").text, 30, "text to show")
            first_word = driver.find_element(By.CSS_SELECTOR, "#transcript .committed .word")
            ActionChains(driver).move_to_element(first_word).perform()
            driver.save_screenshot(str(Path(screenshot)))
        # let the whole recording play (the device runs in real time), then stop inside the silence
        time.sleep(max(0.0, duration + 1.5 - (time.monotonic() - started)))
        driver.find_element(By.ID, "stop").click()
        _wait(lambda: body.get_attribute("data-items-completed") != "0", 120, "the transcript")
        page_text = " ".join(e.text for e in driver.find_elements(By.CSS_SELECTOR, "#transcript .committed"))
        status = driver.find_element(By.ID, "status").text
        hover = driver.find_element(By.CSS_SELECTOR, "#transcript .committed .word").get_attribute("title")
        interim = driver.find_element(By.CSS_SELECTOR, "#transcript .interim").text
    finally:
        driver.quit()
    assert status == "Done."
    assert "committed at" in hover  # word timestamps on hover
    assert interim == ""  # the interim guess is gone once the item is complete
    reference = stream_text(tiny, audio)  # `susurrus stream FILE`
    wer_page = corpus_error_rate([(item.text, page_text)])
    wer_stream = corpus_error_rate([(item.text, reference)])
    print(f"\npage: {page_text!r} (WER {wer_page:.1f} %)\nsusurrus stream: {reference!r} (WER {wer_stream:.1f} %)")
    assert wer_page <= wer_stream + 3.0, (page_text, reference)


@pytest.mark.skipif(CHROMIUM is None or DRIVER is None,
                    reason="headless Chromium not installed (apt-get install chromium chromium-driver; .ci/run does)")
@pytest.mark.slow
def test_browser_demo_with_turn_detection_shows_each_turn_as_a_paragraph(server, longform_items, tmp_path):
    """The *Turn detection* checkbox: three utterances with 1 s of silence between them (twice
    server VAD's 500 ms) reach the page as three completed paragraphs while the microphone stays
    live."""
    pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.common.by import By

    from susurrus.evaluation import signals

    item = next((i for i in longform_items if i.id.startswith("dev_ljspeech")), None)
    if item is None or len(item.segments) < 8:
        pytest.skip("the LJSpeech long-form stream (with segments) is not in the manifest")
    segs = [item.segments[k] for k in (1, 7, 12)]  # 1.9, 1.8 and 2.6 s
    full = decode_audio(item.audio)
    pieces = [full[round((s["start_s"] - 0.2) * 16000):round((s["end_s"] + 0.2) * 16000)] for s in segs]
    audio = np.concatenate([pieces[0], signals.silence(1.0), pieces[1], signals.silence(1.0), pieces[2]])
    texts = [s["text"] for s in segs]
    wav = tmp_path / "mic.wav"  # Chromium loops the file: 5 s of silence after it, the test stops inside
    sf.write(wav, np.concatenate([audio, np.zeros(5 * 16000, np.float32)]), 16000, subtype="PCM_16")

    driver = _chromium(wav)
    try:
        driver.get(f"{server.http_url}/")
        body = driver.find_element(By.TAG_NAME, "body")
        driver.find_element(By.ID, "turns").click()
        driver.find_element(By.ID, "start").click()
        _wait(lambda: body.get_attribute("data-state") == "live", 30, "the microphone to start")
        _wait(lambda: body.get_attribute("data-items-completed") == "3", len(audio) / 16000 + 30, "three turns")
        still_live = body.get_attribute("data-state")
        driver.find_element(By.ID, "stop").click()
        _wait(lambda: body.get_attribute("data-state") == "idle", 30, "the session to end")
        paragraphs = [e.get_attribute("data-transcript")
                      for e in driver.find_elements(By.CSS_SELECTOR, "#transcript .item")]
        status = driver.find_element(By.ID, "status").text
    finally:
        driver.quit()
    print(f"\nparagraphs: {paragraphs}")
    assert still_live == "live"  # a completed turn does not end the session
    assert status == "Done."
    assert len(paragraphs) == 3
    assert corpus_error_rate(list(zip(texts, paragraphs))) <= 15.0


@pytest.mark.skipif(CHROMIUM is None or DRIVER is None,
                    reason="headless Chromium not installed (apt-get install chromium chromium-driver; .ci/run does)")
@pytest.mark.slow
def test_browser_demo_keeps_an_api_key_error_on_screen(guarded_server, dev_item, tmp_path):
    """A server with an API key: Start without a key, then with a wrong one. Each time the refusal
    stays on the page (idle, in red) once the page is done starting, instead of flashing before
    'Listening…'; the right key then streams."""
    pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.common.by import By

    wav = tmp_path / "mic.wav"
    sf.write(wav, decode_audio(dev_item(CLIP).audio), 16000, subtype="PCM_16")
    driver = _chromium(wav)
    try:
        driver.get(f"{guarded_server.http_url}/")
        body = driver.find_element(By.TAG_NAME, "body")
        status = driver.find_element(By.ID, "status")
        key = driver.find_element(By.ID, "apikey")
        seen = []
        for n, typed in enumerate(["", "wrong-key", "test-key"], start=1):
            key.clear()
            key.send_keys(typed)
            driver.find_element(By.ID, "start").click()
            _wait(lambda n=n: body.get_attribute("data-begun") == str(n), 30, "the start to settle")
            seen.append((body.get_attribute("data-state"), status.text, "error" in status.get_attribute("class"),
                         driver.find_element(By.ID, "start").is_enabled()))
        driver.find_element(By.ID, "stop").click()
        _wait(lambda: body.get_attribute("data-state") == "idle", 60, "the session to end")
    finally:
        driver.quit()
    for state, text, red, can_retry in seen[:2]:
        assert state == "idle" and red and can_retry, seen
        assert text.startswith("Server error (invalid_api_key)"), seen
    assert seen[2][0] == "live" and not seen[2][2] and seen[2][1].startswith("Listening"), seen


@pytest.mark.skipif(CHROMIUM is None or DRIVER is None,
                    reason="headless Chromium not installed (apt-get install chromium chromium-driver; .ci/run does)")
@pytest.mark.slow
def test_browser_demo_streams_a_file_when_the_browser_blocks_playback(server, tiny, dev_item, tmp_path):
    """*Stream a file* in a browser that blocks audio until the page is clicked: the page says
    that playback is blocked, streams the file without sound, and its transcript is the stream's.

    Headless Chromium plays audio whatever its autoplay flag, so the block is what a blocking
    browser does to the page, set up before the page loads: every ``AudioContext`` is suspended
    as it is made (its graph runs no audio: nothing reaches the capture worklet, the file never
    ends by itself), ``resume()`` never settles and the context stays ``suspended``. Only the
    page's own fallback, which sends the file at speaking pace by a timer, can bring the text."""
    pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.common.by import By

    item = dev_item(CLIP)
    audio = decode_audio(item.audio)
    clip = tmp_path / "clip.wav"
    sf.write(clip, audio, 16000, subtype="PCM_16")
    driver = _chromium(clip, "--autoplay-policy=user-gesture-required")
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": """
        const Real = window.AudioContext;
        window.AudioContext = class extends Real {
            constructor(...args) { super(...args); Real.prototype.suspend.call(this); }
            resume() { return new Promise(() => {}); }
            get state() { return "suspended"; }
        };"""})
    try:
        driver.get(f"{server.http_url}/")
        body = driver.find_element(By.TAG_NAME, "body")
        driver.find_element(By.ID, "file").send_keys(str(clip))
        _wait(lambda: body.get_attribute("data-begun") == "1", 30, "the start to settle")
        state, status = body.get_attribute("data-state"), driver.find_element(By.ID, "status").text
        _wait(lambda: body.get_attribute("data-items-completed") not in (None, "0"), len(audio) / 16000 + 60,
              "the transcript")
        page_text = " ".join(e.text for e in driver.find_elements(By.CSS_SELECTOR, "#transcript .committed"))
    finally:
        driver.quit()
    assert state == "live", status
    assert "blocked playback" in status, status
    reference = stream_text(tiny, audio)
    wer_page = corpus_error_rate([(item.text, page_text)])
    wer_stream = corpus_error_rate([(item.text, reference)])
    print(f"\npage: {page_text!r} (WER {wer_page:.1f} %)\nsusurrus stream: {reference!r} (WER {wer_stream:.1f} %)")
    assert wer_page <= wer_stream + 3.0, (page_text, reference)
