"""The token ids that the model, the vocabularies, the pipelines and the decoders agree on.

tensor2tensor's convention: 0 pads, 1 ends a sentence. The decoder input is the target shifted
right by one with PAD_ID in front.
"""

PAD_ID = 0
EOS_ID = 1
