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

CLIP = "librispeech_test-clean_1089-134691-0001"  # 5.4 s
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


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
def test_browser_demo_transcribes_the_microphone(server, tiny, dev_item, tmp_path):
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    item = dev_item(CLIP)
    audio = decode_audio(item.audio)
    duration = len(audio) / 16000
    # Chromium loops the file: 4 s of silence after the speech, and the test stops inside it
    wav = tmp_path / "mic.wav"
    sf.write(wav, np.concatenate([audio, np.zeros(4 * 16000, np.float32)]), 16000, subtype="PCM_16")

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1100,760",
                 "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
                 f"--use-file-for-fake-audio-capture={wav}", "--autoplay-policy=no-user-gesture-required"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
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
