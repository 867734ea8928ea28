// Every way a dataset can be wrong gives an Error naming the file, the line and the problem.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "io/io_test_util.h"
#include "tfm/error.h"
#include "training/dataset.h"
#include "training/dataset_goldens.h"
#include "training/dataset_split.h"

namespace tfm::training {
namespace {

using testing::AllOf;
using testing::HasSubstr;
using testing::ThrowsMessage;
using testing_io::TempDir;
using testing_io::write_file;
using testing_training::qwen3_tokenizer;

class DatasetErrors : public ::testing::Test {
 protected:
  std::string file(const std::string& name, const std::string& bytes) {
    const std::string path = (dir_ / name).string();
    write_file(path, bytes);
    return path;
  }
  // The message of the Error that reading `bytes` as JSONL raises.
  std::string jsonl_error(const std::string& bytes, const JsonlOptions& options = {}) {
    const std::string path = file("data.jsonl", bytes);
    try {
      read_jsonl(path, options);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  }

  TempDir dir_;
};

TEST_F(DatasetErrors, MissingFile) {
  const std::string path = (dir_ / "absent.txt").string();
  EXPECT_THAT([&] { read_text_file(path); },
              ThrowsMessage<Error>(AllOf(HasSubstr(path), HasSubstr("cannot open"))));
  EXPECT_THAT([&] { read_dataset(path + ".jsonl"); },
              ThrowsMessage<Error>(HasSubstr("cannot open")));
  for (const std::string& folder : {dir_.path().string(), dir_.path().string() + "/"}) {
    EXPECT_THAT([&] { read_dataset(folder); },
                ThrowsMessage<Error>(HasSubstr("a folder, not a file")));
  }
}

TEST_F(DatasetErrors, MalformedJsonNamesTheLine) {
  const std::string message = jsonl_error("{\"text\": \"a\"}\n\n{\"text\": \"b\",}\n");
  EXPECT_THAT(message, HasSubstr("data.jsonl:3: not valid JSON"));
  EXPECT_THAT(jsonl_error("[1, 2]\n"),
              HasSubstr("data.jsonl:1: expected a JSON object, got an array"));
  EXPECT_THAT(
      jsonl_error(R"({"text": )" + std::string(100000, '[') + std::string(100000, ']') + "}\n"),
      HasSubstr("data.jsonl:1: not valid JSON ([json.exception.parse_error.101] parse "
                "error: nested deeper than 1000 levels"));
  // A number beyond double's range is nlohmann's out_of_range, not a parse_error: still the line.
  EXPECT_THAT(jsonl_error("{\"text\": \"a\"}\n{\"text\": 1e99999}\n"),
              HasSubstr("data.jsonl:2: not valid JSON ([json.exception.out_of_range.406] number "
                        "overflow parsing '1e99999')"));
}

TEST_F(DatasetErrors, MissingField) {
  EXPECT_THAT(jsonl_error("{\"content\": \"a\"}\n"),
              HasSubstr("data.jsonl:1: no \"text\" or \"input_ids\" field"));
  EXPECT_THAT(jsonl_error("{\"text\": \"a\"}\n{\"input_ids\": [1]}\n"),
              HasSubstr("data.jsonl:2: no \"text\" field"));
  EXPECT_THAT(jsonl_error("{\"input_ids\": [1]}\n{\"text\": \"a\"}\n"),
              HasSubstr("data.jsonl:2: no \"input_ids\" field"));
  EXPECT_THAT(jsonl_error("{\"body\": \"a\"}\n{\"text\": \"a\"}\n", {.text_field = "body"}),
              HasSubstr("data.jsonl:2: no \"body\" field"));
}

TEST_F(DatasetErrors, WrongType) {
  EXPECT_THAT(jsonl_error("{\"text\": \"a\"}\n{\"text\": 5}\n"),
              HasSubstr("data.jsonl:2: \"text\" is an integer, expected a string"));
  EXPECT_THAT(jsonl_error("{\"text\": null}\n"),
              HasSubstr(":1: \"text\" is null, expected a string"));
  EXPECT_THAT(jsonl_error("{\"input_ids\": \"1 2 3\"}\n"),
              HasSubstr(":1: \"input_ids\" is a string, expected an array"));
  EXPECT_THAT(jsonl_error("{\"input_ids\": [1, 2.5]}\n"),
              HasSubstr(":1: \"input_ids\"[1] is a number, expected a token id"));
  EXPECT_THAT(jsonl_error("{\"input_ids\": [[1]]}\n"),
              HasSubstr("\"input_ids\"[0] is an array, expected a token id"));
}

TEST_F(DatasetErrors, TokenIdOutsideTheVocabulary) {
  const JsonlOptions vocab{.vocab_size = 100};
  EXPECT_THAT(jsonl_error("{\"input_ids\": [0, 99]}\n{\"input_ids\": [5, 100]}\n", vocab),
              HasSubstr("data.jsonl:2: \"input_ids\"[1] = 100 is outside the vocabulary [0, 100)"));
  EXPECT_THAT(jsonl_error("{\"input_ids\": [-1]}\n", vocab),
              HasSubstr(":1: \"input_ids\"[0] = -1 is outside the vocabulary"));
  EXPECT_THAT(jsonl_error("{\"input_ids\": [2147483648]}\n"),
              HasSubstr("= 2147483648 is outside the int32 token id range"));
  EXPECT_THAT(jsonl_error("{\"input_ids\": [18446744073709551615]}\n"),
              HasSubstr("is outside the int32 token id range"));
}

TEST_F(DatasetErrors, EmptyDataset) {
  EXPECT_THAT([&] { read_text_file(file("empty.txt", "")); },
              ThrowsMessage<Error>(AllOf(HasSubstr("empty.txt"), HasSubstr("no examples"))));
  EXPECT_THAT(
      [&] { read_text_file(file("blank.txt", "\n\n\n\n"), {.sample_by = SampleBy::kParagraph}); },
      ThrowsMessage<Error>(HasSubstr("no examples")));
  EXPECT_THAT(jsonl_error("\n  \n"), HasSubstr("data.jsonl: empty, no examples"));
  // Examples there, but too few tokens for one row.
  const std::string short_text = file("short.txt", "Hello\nworld\n\n");
  const Examples tokens = tokenize_examples(read_text_file(short_text), qwen3_tokenizer());
  EXPECT_THAT([&] { pack_examples(tokens, 16); },
              ThrowsMessage<Error>(AllOf(HasSubstr("short.txt has 2 tokens"),
                                         HasSubstr("not one block of max_length 16"))));
  EXPECT_THAT([&] { pad_examples(tokens, 16, 0); },
              ThrowsMessage<Error>(HasSubstr("no example of two or more tokens")));
}

TEST_F(DatasetErrors, InvalidUtf8NamesTheLine) {
  const std::string path = file("latin1.txt", "fine\ncaf\xe9\n");
  const Examples lines = read_text_file(path);
  EXPECT_THAT([&] { tokenize_examples(lines, qwen3_tokenizer()); },
              ThrowsMessage<Error>(HasSubstr("latin1.txt:2: ")));
}

TEST_F(DatasetErrors, MissingTokenizerOrPadId) {
  const std::string text = file("a.txt", "Hello world, how are you\n");
  EXPECT_THAT([&] { load_rows(text, nullptr, {}); },
              ThrowsMessage<Error>(HasSubstr("holds text: it needs a tokenizer")));
  const std::string ids = file("ids.jsonl", "{\"input_ids\": [1, 2, 3]}\n");
  DatasetOptions padded{.max_length = 4, .shaping = RowShaping::kPadded};
  EXPECT_THAT([&] { load_rows(ids, nullptr, padded); },
              ThrowsMessage<Error>(HasSubstr("need a pad_token_id")));
  padded.pad_token_id = 0;
  EXPECT_EQ(load_rows(ids, nullptr, padded).input_ids, (std::vector<int32_t>{1, 2, 3, 0}));
  EXPECT_THAT([&] { pack_examples(read_text_file(text), 4); },
              ThrowsMessage<Error>(HasSubstr("is not tokenized yet")));
  EXPECT_THAT([&] { pack_examples(read_jsonl(ids), 0); },
              ThrowsMessage<Error>(HasSubstr("max_length must be positive")));
}

TEST_F(DatasetErrors, BadSplits) {
  const Examples lines = read_text_file(file("few.txt", "a\nb\nc\n"));
  EXPECT_THAT([&] { split_examples(lines, 0.7); },
              ThrowsMessage<Error>(HasSubstr("few.txt: holding out 0.7")));
  EXPECT_THAT([&] { split_examples(read_text_file(file("one.txt", "a\n")), 0.1); },
              ThrowsMessage<Error>(HasSubstr("of 1 examples leaves one side empty")));
  EXPECT_THAT([&] { split_examples(lines, 1.0); },
              ThrowsMessage<Error>(HasSubstr("validation_fraction must lie in (0, 1)")));
  EXPECT_THAT([&] { split_document(lines, 0.5); },
              ThrowsMessage<Error>(HasSubstr("must be one text example")));
}

TEST_F(DatasetErrors, SplitDocumentCutsBetweenCharactersNotBytes) {
  // "héllo wör€": 10 characters in 13 bytes; the train part is the first 9 characters.
  const Examples doc = read_text_file(file("utf8.txt", "h\xc3\xa9llo w\xc3\xb6r\xe2\x82\xac"),
                                      {.sample_by = SampleBy::kDocument});
  const DatasetSplit split = split_document(doc, 0.1);
  EXPECT_EQ(split.train.texts.at(0), "h\xc3\xa9llo w\xc3\xb6r");
  EXPECT_EQ(split.validation.texts.at(0), "\xe2\x82\xac");
}

}  // namespace
}  // namespace tfm::training
