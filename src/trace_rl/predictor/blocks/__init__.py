"""The feature blocks of the convex predictor, one family per module (the protocol in ``base``, the name -> class
map in ``registry``; see docs/predictor.md#the-convex-predictors-file-map)."""
