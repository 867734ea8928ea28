// Where a model named like on the Hugging Face Hub lives on this machine. Resolution is offline:
// tfm never downloads; it finds what `hf download` (or transformers) already put in the cache.
#pragma once

#include <filesystem>
#include <string>

namespace tfm {

// A local folder or file is returned as is. Otherwise `id_or_path` is taken as "Org/Name" and
// looked up in the Hugging Face cache, found as huggingface_hub finds it ($HF_HUB_CACHE, else
// $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub): the snapshot
// named by refs/main, else the newest snapshot. Throws tfm::Error listing every place looked at and
// how to download the model.
std::filesystem::path resolve_pretrained(const std::string& id_or_path);

}  // namespace tfm
