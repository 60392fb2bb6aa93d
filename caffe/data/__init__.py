"""The data pipeline behind the data layers: databases (db: LMDB, LevelDB), which items a
worker reads (shard), record decoding (raw_datum, image_codec, jpeg_fast), transform_param
(transformer), batches assembled on reader threads (batch_assembly, threads) and prefetched
ahead of the net (prefetch)."""
