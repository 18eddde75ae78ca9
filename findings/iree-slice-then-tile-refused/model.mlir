module {
  func.func @nncert(%arg0: !torch.vtensor<[1,4],ui8>) -> !torch.vtensor<[1,4],ui8> attributes {torch.onnx_meta.ir_version = 10 : si64, torch.onnx_meta.opset_version = 21 : si64, torch.onnx_meta.producer_name = "nncert", torch.onnx_meta.producer_version = ""} {
    %0 = torch.operator "onnx.Constant"() {torch.onnx.value = dense_resource<n1> : tensor<2xsi64>} : () -> !torch.vtensor<[2],si64> 
    %1 = torch.operator "onnx.Constant"() {torch.onnx.value = dense_resource<n2> : tensor<2xsi64>} : () -> !torch.vtensor<[2],si64> 
    %2 = torch.operator "onnx.Constant"() {torch.onnx.value = dense_resource<n3> : tensor<2xsi64>} : () -> !torch.vtensor<[2],si64> 
    %none = torch.constant.none
    %3 = torch.operator "onnx.Add"(%0, %1) : (!torch.vtensor<[2],si64>, !torch.vtensor<[2],si64>) -> !torch.vtensor<[2],si64> 
    %4 = torch.operator "onnx.Slice"(%arg0, %0, %3) : (!torch.vtensor<[1,4],ui8>, !torch.vtensor<[2],si64>, !torch.vtensor<[2],si64>) -> !torch.vtensor<[?,?],ui8> 
    %5 = torch.operator "onnx.Tile"(%4, %2) : (!torch.vtensor<[?,?],ui8>, !torch.vtensor<[2],si64>) -> !torch.vtensor<[1,4],ui8> 
    return %5 : !torch.vtensor<[1,4],ui8>
  }
}

{-#
  dialect_resources: {
    builtin: {
      n1: "0x0800000000000000000000000000000000000000",
      n2: "0x0800000001000000000000000400000000000000",
      n3: "0x0800000001000000000000000100000000000000"
    }
  }
#-}
