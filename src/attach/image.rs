//! Image attachments: signature sniffing, decode check, downscaling, base64. Pure on bytes.
//! PLACEHOLDER: replaced by the image issue.
