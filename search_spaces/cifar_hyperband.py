"""CIFAR-10 with Hyperband: random proposals on the synchronous brackets BOHB uses, so the two
compare as the BOHB paper compares them (the model is the only difference)."""

from search_spaces.cifar_bohb import SPACE as BOHB

# Everything as cifar_bohb (one band of brackets of 27, 12, 6 and 4 trials starting at 1, 3, 9
# and 27 epochs, eta 3), with Tune's random variant generator proposing.
SPACE = BOHB.replace(strategy="hyperband")
