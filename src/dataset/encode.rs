//! Encodes rows as Parquet bytes, the same way every time.

use std::sync::Arc;

use parquet::basic::Compression;
use parquet::errors::ParquetError;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::record::RecordWriter;

/// Encodes `rows` as one Parquet file of one row group, Snappy-compressed. The Hub's own conversions use
/// Snappy, and every reader of `hf://` reads it. The file names hubalign, without its version, as its writer.
pub(crate) fn parquet<R>(rows: &[R]) -> Result<Vec<u8>, ParquetError>
where
    for<'a> &'a [R]: RecordWriter<R>,
{
    let schema = rows.schema()?;
    let properties = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        // Name no version, so an upgrade that writes the same rows writes the same bytes and rewrites
        // nothing.
        .set_created_by("hubalign".to_owned())
        .build();
    let mut bytes = Vec::new();
    let mut writer = SerializedFileWriter::new(&mut bytes, schema, Arc::new(properties))?;
    let mut group = writer.next_row_group()?;
    rows.write_to_row_group(&mut group)?;
    group.close()?;
    writer.close()?;
    Ok(bytes)
}
