// AudioWorklet: the captured (or played) audio, channel 0, as PCM16 little-endian blocks.
// Runs at the AudioContext's rate (the page asks for 24 kHz); posts {pcm: ArrayBuffer, rms}
// every `blockSamples` samples, and what is left when told {flush: true}.
class Pcm16Capture extends AudioWorkletProcessor {
  constructor(options) {
    super();
    this.blockSamples = (options.processorOptions && options.processorOptions.blockSamples) || 2400;
    this.block = new DataView(new ArrayBuffer(this.blockSamples * 2));
    this.filled = 0;
    this.sumSquares = 0;
    this.port.onmessage = (event) => {
      if (event.data && event.data.flush) this.emit();
    };
  }

  emit() {
    if (this.filled === 0) return;
    const pcm = this.block.buffer.slice(0, this.filled * 2);
    const rms = Math.sqrt(this.sumSquares / this.filled);
    this.port.postMessage({ pcm, rms }, [pcm]);
    this.filled = 0;
    this.sumSquares = 0;
  }

  process(inputs) {
    const input = inputs[0];
    if (input && input.length > 0) {
      const channel = input[0];
      for (let i = 0; i < channel.length; i++) {
        const x = channel[i];
        this.sumSquares += x * x;
        this.block.setInt16(this.filled * 2, Math.max(-32768, Math.min(32767, Math.round(x * 32768))), true);
        this.filled += 1;
        if (this.filled === this.blockSamples) this.emit();
      }
    }
    return true;
  }
}

registerProcessor("pcm16-capture", Pcm16Capture);
